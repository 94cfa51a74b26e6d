/*
 * spawn-loop: the bare way to run a program many times, to compare tpd's
 * exec tasks with: posix_spawn and waitpid, keeping PAR children running,
 * nothing else (no pipes, no JSON, no sockets). ARGV[0] is looked up in PATH
 * once, before the loop, as tpd does for an exec task: the loop then pays for
 * the spawn and the wait only, not for failed execs along a long PATH.
 *
 * With -D FILE it is the floor of a durable start: before it spawns, it
 * writes a 64-byte record per start into FILE (preallocated, 16 MiB,
 * written round) and fdatasyncs it, as a journal that records each start
 * before the program runs must, with nothing else in between: no thread
 * hand-off. The starts of one pass (after one wait and the reaps that
 * follow it at once) share one write and one fdatasync, a group commit.
 *
 * usage: spawn-loop [-P PAR] [-n COUNT | -d SECONDS] [-D FILE] [--json] [--] ARGV...
 * Prints the programs run per second (and the count and time; with --json
 * also its own CPU seconds, cpu_s, its children's left out).
 */
#include "config.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpbench-hist.h"

extern char **environ;

#define RECORD_BYTES 64
#define RECORD_FILE_BYTES (16u << 20)
#define STARTS_PER_PASS 64      /* the most starts one pass makes (one record write) */

/*
 * -D: the records of the k (at most STARTS_PER_PASS) starts from number
 * first, on disk before their programs run: one write and one fdatasync for
 * them all (exits on failure).
 */
static void
record_starts(int fd, uint64_t first, unsigned k)
{
	char recs[STARTS_PER_PASS * RECORD_BYTES];
	off_t at = (off_t)((first * RECORD_BYTES) % RECORD_FILE_BYTES);

	if ((uint64_t)at + (uint64_t)k * RECORD_BYTES > RECORD_FILE_BYTES)
		at = 0;
	memset(recs, 0, (size_t)k * RECORD_BYTES);
	for (unsigned i = 0; i < k; i++)
		snprintf(recs + i * RECORD_BYTES, RECORD_BYTES, "started %" PRIu64 "\n", first + i);
	if (pwrite(fd, recs, (size_t)k * RECORD_BYTES, at) != (ssize_t)k * RECORD_BYTES ||
	    fdatasync(fd) == -1) {
		perror("spawn-loop: the starts' record");
		exit(1);
	}
}

/* argv0 itself when it has a slash, else its first executable match in PATH. */
static char *
resolve(const char *argv0)
{
	static char buf[4096];
	const char *path = getenv("PATH"), *p, *colon;
	size_t dlen;

	if (strchr(argv0, '/') != NULL)
		return (char *)argv0;
	if (path == NULL)
		path = "/usr/bin:/bin";
	for (p = path; ; p = colon + 1) {
		colon = strchr(p, ':');
		dlen = colon ? (size_t)(colon - p) : strlen(p);
		if (snprintf(buf, sizeof buf, "%.*s/%s", (int)dlen,
		    dlen ? p : ".", argv0) < (int)sizeof buf &&
		    access(buf, X_OK) == 0)
			return buf;
		if (colon == NULL)
			return NULL;
	}
}

static void
usage(void)
{
	fprintf(stderr, "usage: spawn-loop [-P PAR] [-n COUNT | -d SECONDS] "
	    "[-D FILE] [--json] [--] ARGV...\n");
	exit(64);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t count = 0, started = 0, finished = 0, failed = 0, t0, t_end = 0;
	double duration = 0;
	long par = 1;
	bool json = false;
	char *prog;
	int ch, status, running = 0, record_fd = -1;
	pid_t pid;

	while ((ch = getopt_long(argc, argv, "+P:n:d:D:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'P':
			par = strtol(optarg, NULL, 10);
			if (par < 1 || par > 4096)
				usage();
			break;
		case 'n':
			count = strtoull(optarg, NULL, 10);
			break;
		case 'd':
			duration = strtod(optarg, NULL);
			break;
		case 'j':
			json = true;
			break;
		case 'D':
			record_fd = open(optarg, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			if (record_fd == -1 || (errno = posix_fallocate(record_fd, 0,
			    RECORD_FILE_BYTES)) != 0 || fsync(record_fd) == -1) {
				fprintf(stderr, "spawn-loop: %s: %s\n", optarg, strerror(errno));
				return 1;
			}
			break;
		default:
			usage();
		}
	}
	if (optind >= argc || (count == 0) == (duration <= 0))
		usage();
	argv += optind;
	if ((prog = resolve(argv[0])) == NULL) {
		fprintf(stderr, "spawn-loop: %s: not found in PATH\n", argv[0]);
		return 1;
	}

	t0 = hist_now_ns();
	if (duration > 0)
		t_end = t0 + (uint64_t)(duration * 1e9);
	for (;;) {
		bool more = duration > 0 ? hist_now_ns() < t_end : started < count;
		long k = more ? par - running : 0;

		if (duration <= 0 && (uint64_t)k > count - started)
			k = (long)(count - started);
		if (k > STARTS_PER_PASS)
			k = STARTS_PER_PASS;
		/* -D: the starts this pass makes share one record write (a group commit) */
		if (record_fd != -1 && k > 0)
			record_starts(record_fd, started, (unsigned)k);
		while (k-- > 0) {
			int error = posix_spawn(&pid, prog, NULL, NULL, argv, environ);

			if (error != 0) {
				fprintf(stderr, "spawn-loop: %s: %s\n", prog,
				    strerror(error));
				return 1;
			}
			started++;
			running++;
		}
		if (running == 0)
			break;
		/* one wait, then every other child already gone: the next pass starts them all */
		for (int flags = 0; running > 0; flags = WNOHANG) {
			pid = waitpid(-1, &status, flags);
			if (pid == 0)
				break;
			if (pid == -1) {
				if (errno == EINTR)
					continue;
				perror("spawn-loop: waitpid");
				return 1;
			}
			running--;
			finished++;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				failed++;
		}
	}
	{
		double elapsed = (double)(hist_now_ns() - t0) / 1e9;
		struct rusage ru;

		/* its own CPU, not its children's: what tpd's CPU per task compares with */
		getrusage(RUSAGE_SELF, &ru);
		if (json)
			printf("{\"par\":%ld,\"ok\":%" PRIu64 ",\"failed\":%" PRIu64
			    ",\"elapsed_s\":%.6f,\"rate\":%.3f,\"cpu_s\":%.6f}\n", par,
			    finished - failed, failed, elapsed,
			    (double)(finished - failed) / elapsed,
			    (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
			    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
		else
			printf("spawn-loop: %" PRIu64 " runs of %s (%" PRIu64
			    " failed) at parallelism %ld in %.3f s: %.1f/s\n",
			    finished, argv[0], failed, par, elapsed,
			    (double)(finished - failed) / elapsed);
	}
	return 0;
}
