/*
 * redis-floor: the floor for tpd's Redis source in make bench: a bare
 * hiredis consumer that reads a stream through a consumer group and
 * acknowledges every entry, doing no work (XREADGROUP COUNT B, then one
 * XACK of the B ids, in a loop), so that tpd's rate through one stream
 * can be set beside what the Redis round trips alone allow. It also fills
 * the stream for both.
 *
 *   redis-floor fill ADDR STREAM N TASK      XADD N entries (pipelined), task TASK
 *   redis-floor loop ADDR STREAM GROUP N [B] consume N entries, B per read (100)
 *   redis-floor results ADDR STREAM GROUP RESULTS N [B]
 *                                            the same, and write each entry's
 *       result as tpd's source does: MULTI, an XADD to RESULTS per entry (a done
 *       of the size of an echo's), one XACK of the B ids, EXEC, pipelined. The
 *       floor for what the source's contract asks of Redis, not only of reads.
 *
 * ADDR is unix:PATH or HOST:PORT. loop prints one JSON line: n, seconds,
 * rate (entries per second, from its first read's answer to its last ack's).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static redisContext *
connect_to(const char *addr)
{
	redisContext *c;
	char host[256];
	const char *colon;

	if (strncmp(addr, "unix:", 5) == 0)
		c = redisConnectUnix(addr + 5);
	else if ((colon = strrchr(addr, ':')) != NULL && (size_t)(colon - addr) < sizeof host) {
		memcpy(host, addr, (size_t)(colon - addr));
		host[colon - addr] = '\0';
		c = redisConnect(host, atoi(colon + 1));
	} else {
		fprintf(stderr, "redis-floor: %s is not unix:PATH or HOST:PORT\n", addr);
		exit(64);
	}
	if (c == NULL || c->err != 0) {
		fprintf(stderr, "redis-floor: cannot connect to %s: %s\n", addr,
		    c ? c->errstr : "out of memory");
		exit(69);
	}
	return c;
}

static void
check_reply(redisContext *c, redisReply *r, const char *what)
{
	if (r == NULL) {
		fprintf(stderr, "redis-floor: %s: %s\n", what, c->errstr);
		exit(1);
	}
	if (r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "redis-floor: %s: %s\n", what, r->str);
		exit(1);
	}
}

static int
fill(const char *addr, const char *stream, long n, const char *task)
{
	redisContext *c = connect_to(addr);
	redisReply *r;
	long sent = 0, got = 0;

	while (got < n) {
		/* a window of commands in flight, so the buffers stay small */
		for (; sent < n && sent - got < 1000; sent++)
			redisAppendCommand(c, "XADD %s * task %s", stream, task);
		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			check_reply(c, NULL, "XADD");
		check_reply(c, r, "XADD");
		freeReplyObject(r);
		got++;
	}
	redisFree(c);
	return 0;
}

/* An echo's done as the source writes it (its size is what Redis pays for). */
#define FLOOR_DONE "{\"event\":\"done\",\"task\":1,\"state\":\"succeeded\"," \
	"\"result\":{\"value\":\"x\"},\"queued_ms\":0.012,\"run_ms\":0.003}"

/* MULTI, an XADD of a result per entry of list, one XACK of them, EXEC: pipelined. */
static long
write_results(redisContext *c, const char *stream, const char *group, const char *results,
    redisReply *list, const char **argv)
{
	redisReply *r;
	long acked = 0;
	size_t k;

	redisAppendCommand(c, "MULTI");
	for (k = 0; k < list->elements; k++)
		redisAppendCommand(c, "XADD %s MAXLEN ~ 100000 * done %s entry %s consumer floor "
		    "attempt 1", results, FLOOR_DONE, list->element[k]->element[0]->str);
	argv[0] = "XACK";
	argv[1] = stream;
	argv[2] = group;
	for (k = 0; k < list->elements; k++)
		argv[3 + k] = list->element[k]->element[0]->str;
	redisAppendCommandArgv(c, (int)k + 3, argv, NULL);
	redisAppendCommand(c, "EXEC");
	for (k = 0; k < list->elements + 3; k++) {
		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			check_reply(c, NULL, "EXEC");
		check_reply(c, r, "MULTI/EXEC");
		if (k == list->elements + 2)    /* EXEC: the XADDs' ids, then XACK's count */
			acked = r->element[r->elements - 1]->integer;
		freeReplyObject(r);
	}
	return acked;
}

static int
loop(const char *addr, const char *stream, const char *group, const char *results, long n,
    long batch)
{
	redisContext *c = connect_to(addr);
	redisReply *r;
	const char **argv;
	char count[24];
	long acked = 0;
	double t0 = 0, t1;

	r = redisCommand(c, "XGROUP CREATE %s %s 0 MKSTREAM", stream, group);
	if (r == NULL || (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0))
		check_reply(c, r, "XGROUP CREATE");
	freeReplyObject(r);
	snprintf(count, sizeof count, "%ld", batch);
	if ((argv = calloc((size_t)batch + 3, sizeof *argv)) == NULL)
		return 1;
	while (acked < n) {
		redisReply *list, *a;
		size_t k;

		r = redisCommand(c, "XREADGROUP GROUP %s floor COUNT %s BLOCK 2000 STREAMS %s >",
		    group, count, stream);
		check_reply(c, r, "XREADGROUP");
		if (r->type != REDIS_REPLY_ARRAY) {
			fprintf(stderr, "redis-floor: no entries for 2 s after %ld of %ld\n", acked, n);
			return 1;
		}
		if (t0 == 0)
			t0 = now_s();
		list = r->element[0]->element[1];
		if (results != NULL) {
			acked += write_results(c, stream, group, results, list, argv);
			freeReplyObject(r);
			continue;
		}
		argv[0] = "XACK";
		argv[1] = stream;
		argv[2] = group;
		for (k = 0; k < list->elements; k++)
			argv[3 + k] = list->element[k]->element[0]->str;
		a = redisCommandArgv(c, (int)k + 3, argv, NULL);
		check_reply(c, a, "XACK");
		acked += a->integer;
		freeReplyObject(a);
		freeReplyObject(r);
	}
	t1 = now_s();
	printf("{\"n\":%ld,\"seconds\":%.6f,\"rate\":%.1f}\n", acked, t1 - t0,
	    (double)acked / (t1 - t0));
	free(argv);
	redisFree(c);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "fill") == 0)
		return fill(argv[2], argv[3], atol(argv[4]), argv[5]);
	if ((argc == 6 || argc == 7) && strcmp(argv[1], "loop") == 0)
		return loop(argv[2], argv[3], argv[4], NULL, atol(argv[5]),
		    argc == 7 ? atol(argv[6]) : 100);
	if ((argc == 7 || argc == 8) && strcmp(argv[1], "results") == 0)
		return loop(argv[2], argv[3], argv[4], argv[5], atol(argv[6]),
		    argc == 8 ? atol(argv[7]) : 100);
	fprintf(stderr, "usage: redis-floor fill ADDR STREAM N TASK\n"
	    "       redis-floor loop ADDR STREAM GROUP N [BATCH]\n"
	    "       redis-floor results ADDR STREAM GROUP RESULTS N [BATCH]\n");
	return 64;
}
