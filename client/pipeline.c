/*
 * pipeline.c: several requests at once on one session, each answer matched
 * to its request by id: status, cancel and wait of several tasks.
 *
 * Every request goes out before any answer is read (the link writes while
 * it reads, so the daemon is never left with answers nobody takes). The
 * session numbers the requests, so their ids follow one another and an
 * answer's id is its request's index from the first.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tpctl.h"
#include "wire.h"

int
pipeline_run(struct session *s, size_t n, bool waits,
    pipeline_request_fn request, pipeline_answer_fn answer, void *arg)
{
	bool *settled;
	int64_t first = -1, id;
	size_t i, left;
	json_t *ev;
	int r, code = 0;

	if (n == 0)
		return 0;
	if ((settled = calloc(n, sizeof *settled)) == NULL)
		return EX_OSERR;
	/* a done may take as long as its task: the pong bounds the rest */
	if (waits && session_probe(s, "wait") == -1) {
		code = EX_UNAVAILABLE;
		goto out;
	}
	for (i = 0; i < n; i++) {
		id = waits ? session_send_wait(s, request(arg, i)) :
		    session_send(s, request(arg, i));
		if (id == -1) {
			code = EX_UNAVAILABLE;
			goto out;
		}
		if (i == 0)
			first = id;
	}
	for (left = n; left > 0;) {
		r = session_next(s, &ev, -1);
		if (r == LINK_INTERRUPTED) {
			interrupt_take();
			tpctl_warnx("interrupted: stopped waiting; the tasks go on");
			code = EXIT_SIGNALLED + interrupt_last_signal();
			goto out;
		}
		if (r != LINK_EVENT) {
			code = session_exit_code(r);
			goto out;
		}
		id = event_id(ev);
		/* an error without an id concerns the whole connection */
		if (id == -1 && strcmp(event_name(ev), EV_ERROR) == 0) {
			code = event_report_error(link_address(s->link), ev);
			json_decref(ev);
			goto out;
		}
		if (id < first || (uint64_t)(id - first) >= n || settled[id - first]) {
			json_decref(ev);
			continue;
		}
		i = (size_t)(id - first);
		r = answer(arg, i, ev);
		json_decref(ev);
		if (r == PIPELINE_SETTLED) {
			settled[i] = true;
			left--;
		} else if (r != PIPELINE_MORE) {
			code = r;
			goto out;
		}
	}
out:
	free(settled);
	return code;
}
