/*
 * cpus.h - how many CPUs to size a pool by: the online count, clamped.
 *
 * The gather pool (assemble/gather.c), the daemon's reply buffers
 * (fs/tbuf.c) and the loader's threads each bound themselves by the CPUs,
 * within limits of their own.
 */
#ifndef US_CPUS_H
#define US_CPUS_H

/* us_online_cpus - sysconf's online CPUs, at least @min and at most @max
 * (@min when the count is unknown). */
unsigned us_online_cpus(unsigned min, unsigned max);

#endif /* US_CPUS_H */
