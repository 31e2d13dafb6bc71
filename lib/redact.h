/*
 * redact.h - secrets out of every line unshardfs shows.
 *
 * A SOURCE URL may carry credentials: `user:password@` in its authority, or
 * a presigned URL's query (X-Amz-Signature, X-Amz-Security-Token,
 * X-Amz-Credential, an Azure `sig`, a `token`).  Such a URL reaches refusal
 * messages, syslog, the fsname of /proc/mounts and `inspect`; everything
 * that shows text passes it through us_redact first, so no caller has to
 * remember (error.c does it for every us_err message, fs/msg.c for the log).
 *
 * What is redacted, in every "scheme://" URL found in the text:
 *  - the userinfo before the authority's last '@', written "***";
 *  - the value of every query parameter whose name contains (any case)
 *    "signature", "sig", "token", "credential", "key", "secret",
 *    "password" or "auth", written "REDACTED".
 * A value ends at '&', '#', white space, a quote, or a ':' that is followed
 * by white space or ends the text (how a refusal line goes on after a path).
 */
#ifndef US_REDACT_H
#define US_REDACT_H

#include <stddef.h>

/*
 * us_redact - @in with its secrets redacted, into @out (@cap bytes with the
 * NUL; cut to fit, never past a secret: a cut lands in the text already
 * redacted).  Returns @out.  @in and @out must not overlap.
 */
char *us_redact(const char *in, char *out, size_t cap);

/*
 * us_url_public - @url as it may be shown where there is no room for a
 * redacted query (an fsname): scheme, host and path only, no userinfo, no
 * query, no fragment.  Into @out (@cap bytes with the NUL); returns @out.
 */
char *us_url_public(const char *url, char *out, size_t cap);

#endif /* US_REDACT_H */
