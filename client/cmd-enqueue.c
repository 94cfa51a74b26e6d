/*
 * cmd-enqueue.c: tpctl enqueue: a task added to a Redis stream that tpd
 * hosts consume ([source NAME] in tpd.conf(5)), not sent to a daemon:
 * XADD STREAM * task JSON [id ID] [label L] [queue_timeout_ms N]. Prints
 * the entry's id. With --wait it then follows the results stream for the
 * entry's result and exits as tpctl run does (tpctl results' code).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "tpctl.h"
#include "units.h"
#include "wire.h"

static int
enqueue_exec(struct tpctl *opt, int argc, char **argv)
{
	enum { OPT_REDIS = 2000, OPT_ID, OPT_RESULTS };
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON, TASKOPT_LONGOPTS,
		{ "stdin", no_argument, NULL, 'i' },
		{ "task", required_argument, NULL, OPT_TASK },
		{ "redis", required_argument, NULL, OPT_REDIS },
		{ "stream", required_argument, NULL, 'S' },
		{ "id", required_argument, NULL, OPT_ID },
		{ "wait", no_argument, NULL, 'w' },
		{ "results", required_argument, NULL, OPT_RESULTS },
		{ "output", no_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 }
	};
	const char *redis = NULL, *stream = NULL, *cid = NULL;
	const char *results = NULL;
	const char *av[12];
	char *text = NULL, *results_default = NULL, qt[24], entry[SFMT_STREAM_ID_SIZE];
	struct results_follow rf;
	struct taskopt to;
	redisContext *rc;
	redisReply *r;
	json_t *task = NULL;
	bool wait = false, output = false;
	int ch, code, ac = 0;

	taskopt_init(&to);
	while ((ch = cmd_getopt(&cmd_enqueue, opt, argc, argv,
	    "+:h" TASKOPT_SHORTOPTS "iS:l:wo", longopts)) != -1) {
		switch (ch) {
		case OPT_REDIS:
			redis = optarg;
			continue;
		case 'S':
			stream = optarg;
			continue;
		case OPT_ID:
			cid = optarg;
			continue;
		case 'l':               /* -l: --label, which TASKOPT_LONGOPTS has */
			ch = OPT_LABEL;
			break;
		case 'w':
			wait = true;
			continue;
		case OPT_RESULTS:
			results = optarg;
			continue;
		case 'o':
			output = true;
			continue;
		}
		if (ch == 'h' || ch == '?' || taskopt_option(&to, &cmd_enqueue, ch, optarg) != 1) {
			taskopt_free(&to);
			return ch == 'h' ? 0 : EX_USAGE;
		}
	}
	code = EX_USAGE;
	if (to.pool != NULL) {
		cmd_usage_error(&cmd_enqueue, "--pool: the source's own pool runs the task "
		    "(its pool key in tpd.conf)");
		goto out;
	}
	if (taskopt_scheduling(&to) != NULL) {
		cmd_usage_error(&cmd_enqueue, "%s: a stream entry carries a task, not how the "
		    "daemon schedules it", taskopt_scheduling(&to));
		goto out;
	}
	if (stream == NULL) {
		cmd_usage_error(&cmd_enqueue, "--stream STREAM is needed (a source's stream "
		    "key in tpd.conf)");
		goto out;
	}
	if ((results != NULL || output) && !wait) {
		cmd_usage_error(&cmd_enqueue, "--results and --output go with --wait");
		goto out;
	}
	if (to.queue_timeout_set && to.queue_timeout_ms > SFMT_QUEUE_TIMEOUT_MAX_MS) {
		char d[32];

		cmd_usage_error(&cmd_enqueue, "--queue-timeout: at most %s for a stream's entry",
		    units_format_duration(SFMT_QUEUE_TIMEOUT_MAX_MS, d, sizeof d));
		goto out;
	}
	if ((code = taskopt_build(&to, &cmd_enqueue, argc - optind, argv + optind, &task)) != 0)
		goto out;
	if ((text = json_dumps(task, JSON_COMPACT)) == NULL) {
		code = EX_OSERR;
		goto out;
	}
	if (wait && interrupt_install() == -1) {
		tpctl_warnx("cannot catch signals: %s", strerror(errno));
		code = EX_OSERR;
		goto out;
	}
	redis = redislink_address(redis);
	if ((rc = redislink_open(&cmd_enqueue, redis, opt->connect_timeout_ms, &code)) == NULL)
		goto out;
	av[ac++] = "XADD";
	av[ac++] = stream;
	av[ac++] = "*";
	av[ac++] = SFMT_TASK;
	av[ac++] = text;
	if (cid != NULL) {
		av[ac++] = SFMT_ID;
		av[ac++] = cid;
	}
	if (to.label != NULL) {     /* the entry's field, not the task's */
		av[ac++] = SFMT_LABEL;
		av[ac++] = to.label;
	}
	if (to.queue_timeout_set) {
		snprintf(qt, sizeof qt, "%llu", (unsigned long long)to.queue_timeout_ms);
		av[ac++] = SFMT_QUEUE_TIMEOUT;
		av[ac++] = qt;
	}
	if ((r = redisCommandArgv(rc, ac, av, NULL)) == NULL) {
		code = redislink_failed(rc, redis, "enqueue");
		redisFree(rc);
		goto out;
	}
	if (r->type != REDIS_REPLY_STRING) {
		tpctl_warnx("enqueue: redis at %s: XADD %s: %s", redis, stream,
		    r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected answer");
		freeReplyObject(r);
		redisFree(rc);
		code = EXIT_TASK_FAILED;
		goto out;
	}
	snprintf(entry, sizeof entry, "%s", r->str);
	freeReplyObject(r);
	if (opt->json) {
		json_t *o = json_pack("{s:s, s:s}", SFMT_ENTRY, entry, "stream", stream);
		char *line = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

		printf("%s\n", line != NULL ? line : "{}");
		free(line);
		json_decref(o);
	} else
		printf("%s\n", entry);
	fflush(stdout);
	code = 0;
	if (wait) {
		char *entries[1] = { entry };
		int codes[1] = { -1 };

		if (results == NULL && asprintf(&results_default, "%s:results", stream) == -1) {
			redisFree(rc);
			code = EX_OSERR;
			goto out;
		}
		memset(&rf, 0, sizeof rf);
		rf.rc = rc;
		rf.addr = redis;
		rf.stream = results != NULL ? results : results_default;
		rf.json = opt->json;
		rf.output = output;
		rf.entries = entries;
		rf.codes = codes;
		rf.nentries = 1;
		results_follow_from_entry(&rf, entry);
		if ((code = results_follow_run(&rf)) == 0)
			code = results_follow_code(&rf);
	}
	redisFree(rc);
out:
	free(results_default);
	free(text);
	json_decref(task);
	taskopt_free(&to);
	return code;
}

const struct cmd cmd_enqueue = {
	.name = "enqueue",
	.args = "--redis ADDR --stream STREAM [OPTIONS] [--wait] [--] CMD [ARG...]",
	.summary = "add a task to a Redis stream that tpd hosts consume",
	.help =
	    "Adds CMD as an exec task (or --task JSON, a task of any kind) to STREAM,\n"
	    "a stream tpd reads as a [source NAME] (tpd.conf(5)), and prints the\n"
	    "entry's id. Whichever tpd host reads it runs it, in its source's pool,\n"
	    "and writes its done to the results stream. With --wait, tpctl then waits\n"
	    "for that result and exits as tpctl run does.\n"
	    "\n"
	    "      --redis ADDR         Redis: unix:PATH or HOST[:PORT] ($TPD_REDIS)\n"
	    "  -S, --stream STREAM      the stream the source reads (its stream key)\n"
	    "      --id ID              the entry's own id field, given back with its result\n"
	    "  -l, --label L            the task's label\n"
	    "  -w, --wait               wait for the result and exit as run does\n"
	    "      --results STREAM     with --wait: the results stream (default\n"
	    "                           STREAM:results, the source's default)\n"
	    "  -o, --output             with --wait: print the output the task captured\n"
	    "  -t, --timeout DUR        end the task after DUR (state timed_out; 0: never)\n"
	    "      --queue-timeout DUR  give up if it waits in the pool's queue longer\n"
	    "                           (expired; 0: never)\n"
	    "  -e, --env NAME=VALUE     add to the command's environment (NAME alone:\n"
	    "                           pass on tpctl's own value); repeatable\n"
	    "  -C, --cwd DIR            run the command in DIR (on the host that runs it)\n"
	    "      --output-limit SIZE  capture at most SIZE bytes per stream (64k, 1M)\n"
	    "  -i, --stdin              send tpctl's stdin to the command (text or binary)\n"
	    "      --task JSON          enqueue this task object instead of a command\n",
	.exec = enqueue_exec,
};
