/* listen.h: the Unix and TCP listeners (loop thread only). */
#ifndef TPD_LISTEN_H
#define TPD_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * Listens on a Unix socket at path, creating its directory if missing. A
 * stale socket file of a dead daemon is replaced; a live one is an error
 * naming the path. mode and group (NULL = keep) are applied to the file.
 */
int listen_unix(const char *path, mode_t mode, const char *group, char **cause);

/* Listens on HOST:PORT ("127.0.0.1:7420", "[::1]:0", "*:7420"); logs the bound port. */
int listen_tcp(const char *hostport, char **cause);

/* Takes over an already listening socket (socket activation). */
int listen_adopt(int fd, bool is_unix, const char *name, char **cause);

/* How many listeners there are, and what each listens on: "unix PATH", "tcp 127.0.0.1:7420". */
size_t listen_count(void);
const char *listen_name(size_t i);

/* Stops accepting (new connections are refused by the kernel). */
void listen_close_all(void);

#endif
