/*
 * cmd-ping.c: tpctl ping: the round trip of a ping, and who answered (the
 * hello's server, version, protocol and role).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

/* The default for ping --timeout, unless --timeout-answer is given. */
#define PING_TIMEOUT_MS 5000

static int
ping_exec(struct tpctl *opt, int argc, char **argv)
{
	static const struct option longopts[] = {
		CMD_LONGOPTS_COMMON,
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t timeout, start, rtt;
	struct session s;
	json_t *reply, *hello = NULL;
	int ch, code;

	timeout = opt->answer_timeout_set ? opt->answer_timeout_ms : PING_TIMEOUT_MS;
	while ((ch = cmd_getopt(&cmd_ping, opt, argc, argv, ":ht:", longopts)) != -1) {
		if (ch != 't')
			return ch == 'h' ? 0 : EX_USAGE;
		if (cmd_duration_arg(&cmd_ping, "--timeout", optarg, &timeout) == -1)
			return EX_USAGE;
	}
	if (argc > optind)
		return cmd_usage_error(&cmd_ping, "no arguments expected");
	if ((code = session_open(&s, opt)) != 0)
		return code;
	s.answer_timeout_ms = timeout;
	s.answer_option = "--timeout";
	start = tpctl_now_us();
	code = session_call(&s, json_pack("{s:s}", FIELD_OP, OP_PING), &reply);
	rtt = tpctl_now_us() - start;
	if (code == 0 && strcmp(event_name(reply), EV_PONG) != 0) {
		code = event_report_error("ping", reply);
		json_decref(reply);
	} else if (code == 0) {
		json_decref(reply);
		/* who answered: hello names the server (its errors do not matter) */
		if (opt->token_file == NULL && session_call(&s, json_pack("{s:s, s:s}",
		    FIELD_OP, OP_HELLO, FIELD_CLIENT, "tpctl/" PACKAGE_VERSION),
		    &hello) == 0 &&
		    strcmp(event_name(hello), EV_HELLO) != 0) {
			json_decref(hello);
			hello = NULL;
		}
		if (!opt->json) {
			printf("pong from %s in %.3fms", link_address(s.link),
			    (double)rtt / 1000.0);
			if (hello != NULL)
				printf(" (%s %s, protocol %lld, role %s)",
				    format_safe(event_str(hello, FIELD_SERVER, "?")),
				    format_safe(event_str(hello, FIELD_VERSION, "?")),
				    (long long)event_int(hello, FIELD_PROTOCOL, 0),
				    format_safe(event_str(hello, FIELD_ROLE, "?")));
			printf("\n");
		}
		json_decref(hello);
	}
	session_close(&s);
	return code;
}

const struct cmd cmd_ping = {
	.name = "ping",
	.args = "[--timeout DUR]",
	.summary = "check that the daemon answers",
	.help =
	    "Sends ping and prints the round trip time and who answered.\n"
	    "Exits 69 when no pong comes within the timeout.\n"
	    "\n"
	    "  -t, --timeout DUR        wait at most DUR for the pong (default 5s, or\n"
	    "                           --timeout-answer when that is given; 0: no limit)\n",
	.exec = ping_exec,
};
