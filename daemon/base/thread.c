/* thread.c: threads started without asynchronous signals (thread.h). */
#include "config.h"

#include <signal.h>

#include "thread.h"

int
thread_create_unsignalled(pthread_t *thread, const pthread_attr_t *attr,
    void *(*start)(void *), void *arg)
{
	static const int synchronous[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
	    SIGABRT };
	sigset_t blocked, old;
	int e;

	sigfillset(&blocked);
	for (size_t i = 0; i < sizeof synchronous / sizeof synchronous[0]; i++)
		sigdelset(&blocked, synchronous[i]);
	/* the new thread inherits the mask in force when it is made */
	pthread_sigmask(SIG_BLOCK, &blocked, &old);
	e = pthread_create(thread, attr, start, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}
