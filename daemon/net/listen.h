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

/*
 * -1 with *cause set when a live daemon answers on the socket at path (the
 * check tpd makes before anything else, so that this is all it says); 0
 * otherwise, whatever is there (listen_unix deals with it).
 */
int listen_unix_busy(const char *path, char **cause);

/* Listens on HOST:PORT ("127.0.0.1:7420", "[::1]:0", "*:7420"); logs the bound port. */
int listen_tcp(const char *hostport, char **cause);

/*
 * The socket of listen_tcp, for another server of the loop (metrics.c): a
 * listening TCP socket on hostport, non-blocking and close-on-exec, with
 * its bound address in name ("tcp 127.0.0.1:9100"). Returns the fd, or -1
 * with *cause set (what names the setting in the message).
 */
int listen_tcp_socket(const char *hostport, const char *what, char *name, size_t namelen,
    char **cause);

/* Takes over an already listening socket (socket activation). */
int listen_adopt(int fd, bool is_unix, const char *name, char **cause);

/* How many listeners there are, and what each listens on: "unix PATH", "tcp 127.0.0.1:7420". */
size_t listen_count(void);
const char *listen_name(size_t i);

/* Stops accepting (new connections are refused by the kernel). */
void listen_close_all(void);

#endif
