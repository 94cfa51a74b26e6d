/*
 * interrupt.c: SIGINT, SIGTERM and SIGHUP turned into something the poll
 * loop can see. The handler counts the signal and writes a byte to a pipe
 * that link_recv polls beside the socket (the self-pipe trick), so a
 * command decides what an interrupt means: run cancels its task on the
 * first and exits on the second.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tpctl.h"

static int interrupt_pipe[2] = { -1, -1 };
static volatile sig_atomic_t interrupt_n;
static volatile sig_atomic_t interrupt_sig;

static void
interrupt_handler(int sig)
{
	int saved = errno;
	ssize_t n;

	interrupt_n++;
	interrupt_sig = sig;
	n = write(interrupt_pipe[1], "", 1);   /* a full pipe is already readable */
	(void)n;
	errno = saved;
}

int
interrupt_install(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;
	size_t i;

	if (interrupt_pipe[0] != -1)
		return 0;
	if (pipe2(interrupt_pipe, O_CLOEXEC | O_NONBLOCK) == -1)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = interrupt_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;        /* no SA_RESTART: a blocked call returns EINTR */
	for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], &sa, NULL) == -1)
			return -1;
	return 0;
}

int
interrupt_fd(void)
{
	return interrupt_pipe[0];
}

int
interrupt_take(void)
{
	char buf[64];
	ssize_t n;
	int count = 0;

	if (interrupt_pipe[0] == -1)
		return 0;
	while ((n = read(interrupt_pipe[0], buf, sizeof buf)) > 0 ||
	    (n == -1 && errno == EINTR))
		if (n > 0)
			count += (int)n;
	return count;
}

int
interrupt_count(void)
{
	return interrupt_n;
}

int
interrupt_last_signal(void)
{
	return interrupt_sig;
}
