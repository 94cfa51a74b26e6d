/*
 * thread.h: how tpd starts its threads (pool workers, the journal's sync
 * and maintenance threads): without asynchronous signals.
 *
 * A signal sent to tpd (kill, systemctl reload) goes to any one of its
 * threads that does not block it. tpd's handlers (libevent's) would work
 * from any thread, but two things make the loop thread the right one to
 * take them all: a worker interrupted for nothing costs (a SIGCHLD per exec
 * task), and under a sanitizer's runtime a signal that lands in a thread
 * waiting outside its interceptors (a contended mutex, a raw futex) is held
 * until that thread's next intercepted call, which may be never: the
 * daemon then misses a SIGHUP or a SIGTERM. So every thread but the loop's
 * starts with them blocked.
 */
#ifndef TPD_THREAD_H
#define TPD_THREAD_H

#include <pthread.h>

/*
 * pthread_create, with the same arguments and result, whose thread starts
 * with every asynchronous signal blocked; the synchronous ones a fault
 * raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and SIGABRT stay
 * as the caller has them. The caller's own mask is unchanged on return.
 */
int thread_create_unsignalled(pthread_t *thread, const pthread_attr_t *attr,
    void *(*start)(void *), void *arg);

#endif
