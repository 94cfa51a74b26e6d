/* wire.c: the default socket rule shared by tpd and tpctl. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "wire.h"

char *
wire_default_socket_path(char *buf, size_t len)
{
	const char *dir;
	int n;

	/* RUNTIME_DIRECTORY may list several directories, separated by ':' */
	if ((dir = getenv("RUNTIME_DIRECTORY")) != NULL && *dir != '\0') {
		size_t first = 0;
		while (dir[first] != '\0' && dir[first] != ':')
			first++;
		n = snprintf(buf, len, "%.*s/tpd.sock", (int)first, dir);
	} else if (geteuid() == 0)
		n = snprintf(buf, len, "%s", WIRE_SYSTEM_SOCKET);
	else if ((dir = getenv("XDG_RUNTIME_DIR")) != NULL && *dir != '\0')
		n = snprintf(buf, len, "%s/tpd.sock", dir);
	else
		n = snprintf(buf, len, "/tmp/tpd-%u/tpd.sock", (unsigned)getuid());
	if (n < 0 || (size_t)n >= len)
		return NULL;
	return buf;
}
