/*
 * cuda_probe.c - count CUDA devices without initialising CUDA in this
 * process.
 *
 * The daemon forks (fuse_daemonize) after its start-up checks, and a CUDA
 * context does not survive fork(): a child of a process that called
 * cudaGetDeviceCount() gets "initialization error" from every later call,
 * so the executor would silently fall back to the CPU.  The question is
 * therefore asked by a short-lived child, and the parent stays CUDA-free
 * until the first cast, after the fork.
 */
#include "cuda.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct probe_reply {
	int ndev;
	char why[120];
};

static void probe_child(int fd)
{
	struct probe_reply r = { 0, "" };
	const char *why = "";

	r.ndev = us_cuda_device_count(&why);
	snprintf(r.why, sizeof(r.why), "%s", why ? why : "");
	if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(1);
	_exit(0);
}

int us_cuda_probe(char *why, size_t whylen)
{
	struct probe_reply r = { 0, "cannot start the CUDA probe" };
	int p[2], status;
	ssize_t got;
	pid_t pid;

	if (pipe(p) < 0)
		goto out;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		probe_child(p[1]);
	}
	close(p[1]);
	if (pid > 0) {
		do
			got = read(p[0], &r, sizeof(r));
		while (got < 0 && errno == EINTR);
		if (got != (ssize_t)sizeof(r))
			r = (struct probe_reply){ 0, "the CUDA probe failed" };
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	close(p[0]);
out:
	if (why && whylen)
		snprintf(why, whylen, "%s", r.why);
	return r.ndev;
}
