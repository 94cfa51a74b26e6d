/*
 * cmd-results.c: tpctl results: the results stream of a tpd source,
 * followed. Each entry there is one task's end, written by the tpd that
 * ran it: done (the done event, as JSON text), entry (the task entry's
 * id), id (the entry's own id field, if it had one), consumer and
 * attempt. Printed one line each as wait prints a done, or with --json
 * as one JSON object each. Given entry ids, it waits for their results
 * only and exits as wait does; tpctl enqueue --wait uses the same code.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "tpctl.h"
#include "wire.h"

#define RESULTS_READ_COUNT_TEXT "100" /* results one XREAD takes */

/* Prints one result; returns its exit code (as wait's), or -1 when stdout is a closed pipe. */
static int
result_print(const struct results_follow *rf, const struct sfmt_result *f, json_t *done)
{
	struct sfmt_bytes entry = f->entry.p != NULL ? f->entry : (struct sfmt_bytes){ "?", 1 };
	const char *consumer = f->consumer.p != NULL ? f->consumer.p : "?";
	int consumer_len = f->consumer.p != NULL ? (int)f->consumer.len : 1;
	const char *attempt = f->attempt.p != NULL ? f->attempt.p : "?";
	int attempt_len = f->attempt.p != NULL ? (int)f->attempt.len : 1;
	char q[FORMAT_DURATION_LEN], *what;
	bool ok = strcmp(event_str(done, FIELD_STATE, ""), STATE_SUCCEEDED) == 0;
	int code = event_task_exit_code(done);

	if (rf->json) {
		json_t *o = json_pack("{s:s%}", SFMT_ENTRY, entry.p, entry.len);
		char *line;

		if (f->id.p != NULL)
			json_object_set_new(o, SFMT_ID, json_stringn(f->id.p, f->id.len));
		if (f->consumer.p != NULL)
			json_object_set_new(o, SFMT_CONSUMER, json_stringn(f->consumer.p,
			    f->consumer.len));
		if (f->attempt.p != NULL) {
			char num[24];

			snprintf(num, sizeof num, "%.*s", attempt_len, attempt);
			json_object_set_new(o, SFMT_ATTEMPT, json_integer(atoll(num)));
		}
		/* the done as tpd wrote it, not as jansson would write it again */
		line = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		if (line == NULL)
			return EX_OSERR;
		line[strlen(line) - 1] = '\0';
		if (printf("%s,\"" SFMT_DONE "\":%.*s}\n", line, (int)f->done.len, f->done.p) < 0 ||
		    fflush(stdout) == EOF) {
			free(line);
			return -1;
		}
		free(line);
		return code;
	}
	if (rf->output && event_write_result_output(done) == -1 && errno == EPIPE)
		return -1;
	what = event_describe_done(done);
	if (rf->output) {
		if (!ok)
			tpctl_warnx("entry %.*s %s", (int)entry.len, entry.p,
			    what != NULL ? what : "failed");
	} else {
		/* a Redis entry's fields are anyone's who may write the stream */
		char *e = strndup(entry.p, entry.len), *cid = NULL, *cons = strndup(consumer, consumer_len),
		    *att = strndup(attempt, attempt_len);

		if (f->id.p != NULL)
			cid = strndup(f->id.p, f->id.len);
		printf("entry %s", e != NULL ? format_safe(e) : "?");
		if (f->id.p != NULL)
			printf(" (id %s)", cid != NULL ? format_safe(cid) : "?");
		printf(": %s, queued %s (consumer %s, attempt %s)\n",
		    what != NULL ? format_safe(what) : "?",
		    format_duration(event_num(done, FIELD_QUEUED_MS, 0), q, sizeof q),
		    cons != NULL ? format_safe(cons) : "?", att != NULL ? format_safe(att) : "?");
		free(e);
		free(cid);
		free(cons);
		free(att);
		if (fflush(stdout) == EOF && errno == EPIPE) {
			free(what);
			return -1;
		}
	}
	free(what);
	return code;
}

/* One result read: printed if it is wanted. Returns 0 to go on, 1 when done, or an exit code + 2. */
static int
result_take(struct results_follow *rf, const redisReply *it)
{
	struct sfmt_result f;
	json_error_t err;
	json_t *done;
	size_t want = 0;
	int code;

	redislink_result(it->element[1], &f);
	if (rf->nentries > 0) {
		if (f.entry.p == NULL)
			return 0;
		for (want = 0; want < rf->nentries; want++)
			if (rf->codes[want] == -1 && strlen(rf->entries[want]) == f.entry.len &&
			    memcmp(rf->entries[want], f.entry.p, f.entry.len) == 0)
				break;
		if (want == rf->nentries)
			return 0;       /* not one waited for (or its second result) */
	}
	if (f.done.p == NULL || (done = json_loadb(f.done.p, f.done.len, 0, &err)) == NULL) {
		tpctl_warnx("results entry %s has no done to read: skipped", it->element[0]->str);
		return 0;
	}
	code = result_print(rf, &f, done);
	json_decref(done);
	if (code == -1)
		return EXIT_BROKEN_PIPE + 2;
	if (rf->nentries > 0) {
		rf->codes[want] = code;
		return --rf->left == 0 ? 1 : 0;
	}
	rf->seen++;
	return rf->count > 0 && rf->seen >= rf->count ? 1 : 0;
}

int
results_follow_run(struct results_follow *rf)
{
	const char *argv[8];
	redisReply *r;
	int code;

	if (rf->nentries > 0)
		rf->left = rf->nentries;
	for (;;) {
		argv[0] = "XREAD";
		argv[1] = "COUNT";
		argv[2] = RESULTS_READ_COUNT_TEXT;
		argv[3] = "BLOCK";
		argv[4] = "0";          /* until one comes: an interrupt ends the wait */
		argv[5] = "STREAMS";
		argv[6] = rf->stream;
		argv[7] = rf->last;
		switch (redislink_call(rf->rc, 8, argv, &r)) {
		case -2:
			return EXIT_SIGNALLED + interrupt_last_signal();
		case -1:
			return redislink_failed(rf->rc, rf->addr, "results");
		}
		if (r->type == REDIS_REPLY_ERROR) {
			tpctl_warnx("results: redis at %s: XREAD %s: %s", rf->addr, rf->stream,
			    r->str);
			freeReplyObject(r);
			return EXIT_TASK_FAILED;
		}
		/* [[stream, [[id, fields], ...]]], or nil */
		for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
			const redisReply *st = r->element[i], *list;

			if (st->type != REDIS_REPLY_ARRAY || st->elements != 2 ||
			    (list = st->element[1])->type != REDIS_REPLY_ARRAY)
				continue;
			for (size_t j = 0; j < list->elements; j++) {
				const redisReply *it = list->element[j];

				if (it->type != REDIS_REPLY_ARRAY || it->elements != 2 ||
				    it->element[0]->type != REDIS_REPLY_STRING)
					continue;
				snprintf(rf->last, sizeof rf->last, "%s", it->element[0]->str);
				if ((code = result_take(rf, it)) != 0) {
					freeReplyObject(r);
					return code == 1 ? 0 : code - 2;
				}
			}
		}
		freeReplyObject(r);
	}
}

/* The exit code for the entries waited for, as wait gives it for tasks. */
int
results_follow_code(const struct results_follow *rf)
{
	int code = 0;

	if (rf->nentries == 1)
		return rf->codes[0];
	for (size_t i = 0; i < rf->nentries; i++)
		if (rf->codes[i] != 0)
			code = EXIT_TASK_FAILED;
	return code;
}

/* Where to start reading so that results of entry (and later) are seen: just before its time. */
void
results_follow_from_entry(struct results_follow *rf, const char *entry)
{
	unsigned long long ms = strtoull(entry, NULL, 10);

	if (ms == 0)
		snprintf(rf->last, sizeof rf->last, "0-0");
	else
		snprintf(rf->last, sizeof rf->last, "%llu-%" PRIu64, ms - 1, UINT64_MAX);
}

static bool
entry_id_ok(const char *s)
{
	return sfmt_stream_id(s, strlen(s));
}

static int
results_exec(struct tpctl *opt, int argc, char **argv)
{
	enum { OPT_REDIS = 2000, OPT_FROM, OPT_COUNT };
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "redis", required_argument, NULL, OPT_REDIS },
		{ "stream", required_argument, NULL, 'S' },
		{ "from", required_argument, NULL, OPT_FROM },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "output", no_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 }
	};
	struct results_follow rf;
	const char *redis = NULL, *from = NULL;
	long long count = 0;
	int ch, code;

	memset(&rf, 0, sizeof rf);
	while ((ch = cmd_getopt(&cmd_results, opt, argc, argv, ":hS:o", longopts)) != -1) {
		switch (ch) {
		case OPT_REDIS:
			redis = optarg;
			break;
		case 'S':
			rf.stream = optarg;
			break;
		case OPT_FROM:
			from = optarg;
			break;
		case OPT_COUNT:
			if (format_parse_int(optarg, 1, INT64_MAX, &count) == -1)
				return cmd_usage_error(&cmd_results, "--count %s: a number from 1 "
				    "up", optarg);
			break;
		case 'o':
			rf.output = true;
			break;
		default:
			return ch == 'h' ? 0 : EX_USAGE;
		}
	}
	if (rf.stream == NULL)
		return cmd_usage_error(&cmd_results, "--stream RESULTS is needed (a source's "
		    "results stream: STREAM:results unless its results key says otherwise)");
	if (from != NULL && strcmp(from, "0") != 0 && !entry_id_ok(from))
		return cmd_usage_error(&cmd_results, "--from %s: an entry id (as 1700000000000-0) "
		    "or 0 for the start", from);
	rf.json = opt->json;
	rf.count = count;
	rf.nentries = (size_t)(argc - optind);
	if (rf.nentries > 0) {
		const char *first = NULL;

		if (count > 0)
			return cmd_usage_error(&cmd_results, "give entries or --count, not both");

		rf.entries = argv + optind;
		if ((rf.codes = calloc(rf.nentries, sizeof *rf.codes)) == NULL)
			return EX_OSERR;
		for (size_t i = 0; i < rf.nentries; i++) {
			rf.codes[i] = -1;
			if (!entry_id_ok(rf.entries[i])) {
				free(rf.codes);
				return cmd_usage_error(&cmd_results, "%s is not an entry id (as "
				    "1700000000000-0, what tpctl enqueue prints)", rf.entries[i]);
			}
			if (first == NULL || strtoull(rf.entries[i], NULL, 10) <
			    strtoull(first, NULL, 10))
				first = rf.entries[i];
		}
		/* a result is written after its entry: from the earliest entry's time on */
		results_follow_from_entry(&rf, first);
	}
	if (from != NULL)
		snprintf(rf.last, sizeof rf.last, "%s", strcmp(from, "0") == 0 ? "0-0" : from);
	else if (rf.nentries == 0)
		snprintf(rf.last, sizeof rf.last, "$");
	if (interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		free(rf.codes);
		return EX_OSERR;
	}
	rf.addr = redislink_address(redis);
	if ((rf.rc = redislink_open(&cmd_results, rf.addr, opt->connect_timeout_ms, &code)) ==
	    NULL) {
		free(rf.codes);
		return code;
	}
	code = results_follow_run(&rf);
	if (code == 0 && rf.nentries > 0)
		code = results_follow_code(&rf);
	redisFree(rf.rc);
	free(rf.codes);
	return code;
}

const struct cmd cmd_results = {
	.name = "results",
	.args = "--redis ADDR --stream RESULTS [--from ID] [--count N] [--output] [ENTRY...]",
	.summary = "follow the results a tpd source writes to a Redis stream",
	.help =
	    "Reads the results stream of a tpd [source NAME] (tpd.conf(5)): one entry\n"
	    "per task that ended, with its done, the task entry's id, its own id field,\n"
	    "the consumer that ran it and its attempt. Prints a line for each as it\n"
	    "comes (with --json, one object each: entry, id, consumer, attempt, done).\n"
	    "Given ENTRY ids (what tpctl enqueue prints), waits for their results only\n"
	    "and exits as tpctl wait does for tasks. An interrupt stops the reading.\n"
	    "\n"
	    "      --redis ADDR         Redis: unix:PATH or HOST[:PORT] ($TPD_REDIS)\n"
	    "  -S, --stream RESULTS     the results stream (a source's results key)\n"
	    "      --from ID            start after entry ID of the results stream (0: from\n"
	    "                           its start; default: new results only, or with\n"
	    "                           ENTRY ids, from the first one's time)\n"
	    "      --count N            stop after N results\n"
	    "  -o, --output             print what each task returned (its captured\n"
	    "                           output) instead of its line; a line on stderr for\n"
	    "                           one that did not succeed\n",
	.exec = results_exec,
};
