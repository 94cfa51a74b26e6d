/*
 * tpbench-sock.h: sockets for the benchmark programs: where to connect
 * (a Unix path or HOST:PORT), connecting with retries while a server
 * starts, listening, and raising the open-file limit.
 */
#ifndef TPBENCH_SOCK_H
#define TPBENCH_SOCK_H

#include <sys/socket.h>
#include <sys/resource.h>

struct sock_target {
	struct sockaddr_storage addr;
	socklen_t len;
	char name[300];         /* "unix:PATH" or "tcp:HOST:PORT", for reports */
};

/* Fills t from a Unix path or a HOST:PORT ("[::1]:7420" for IPv6). */
int sock_target_unix(struct sock_target *t, const char *path, char **cause);
int sock_target_tcp(struct sock_target *t, const char *hostport, char **cause);

/*
 * A connected, blocking stream socket (TCP_NODELAY for TCP). While the path
 * does not exist or the connection is refused, retries every 10 ms for up
 * to timeout_ms. Returns the fd, or -1 with *cause set.
 */
int sock_connect(const struct sock_target *t, int timeout_ms, char **cause);

/* A listening, non-blocking socket bound to t (port 0: any free port). */
int sock_listen(struct sock_target *t, char **cause);

/* The port a TCP socket is bound to, or -1. */
int sock_port(int fd);

int sock_nonblock(int fd);

/*
 * Raises RLIMIT_NOFILE so want descriptors fit (the hard limit too, when
 * allowed). Returns 0, or -1 with *cause set naming the limit reached.
 */
int sock_raise_nofile(rlim_t want, char **cause);

#endif
