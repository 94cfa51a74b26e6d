/*
 * auth.c: roles and authentication (auth.h): one place for the rules, the
 * token set and the admin group in force, which a reload replaces whole,
 * and for who may see a task (its owner and admins). Every refusal is
 * logged here, one line naming the peer.
 */
#include "config.h"

#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "base/log.h"
#include "task/task.h"
#include "tokens.h"
#include "base/utf8.h"
#include "wire.h"

struct auth {
	struct tokens *tokens;      /* NULL: no token file */
	bool tcp_open;              /* tcp_auth = none: TCP peers need no token */
	bool have_admin_gid;
	gid_t admin_gid;
	char *admin_group;          /* its name, for messages */
};

static struct auth *current;

#define AUTH_MAX_WARNINGS 4
static char *warnings[AUTH_MAX_WARNINGS];   /* auth_check_exposure's, for stats */
static size_t nwarnings;

/* A token file others may read: its tokens are theirs too (ssh refuses such key files). */
static void
warn_readable(const char *key, const char *path)
{
	struct stat st;

	if (path != NULL && stat(path, &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0)
		log_warnx("%s %s is readable by %s (mode %04o): whoever reads it can use its "
		    "tokens; chmod 600 it", key, path, (st.st_mode & S_IROTH) ? "others" :
		    "its group", (unsigned)(st.st_mode & 07777));
}

/* Adds a warning for stats, and logs it. */
static void __attribute__((format(printf, 1, 2)))
exposure_warn(const char *fmt, ...)
{
	va_list ap;
	char *w = NULL;

	va_start(ap, fmt);
	if (vasprintf(&w, fmt, ap) == -1)
		w = NULL;
	va_end(ap);
	if (w == NULL)
		return;
	log_warnx("%s", w);
	if (nwarnings < AUTH_MAX_WARNINGS)
		warnings[nwarnings++] = w;
	else
		free(w);
}

void
auth_check_exposure(const struct conf *c, const char *const *listeners, size_t n)
{
	char ways[512] = "";
	size_t len = 0;

	for (size_t i = 0; i < nwarnings; i++)
		free(warnings[i]);
	nwarnings = 0;
	warn_readable("token_file", c->token_file);
	warn_readable("admin_token_file", c->admin_token_file);
	if (geteuid() != 0)
		return;
	/* the ways in for someone who is not root */
	for (size_t i = 0; i < n && len < sizeof ways - 128; i++) {
		struct stat st;
		struct group *gr;
		if (strncmp(listeners[i], "tcp ", 4) == 0)
			len += (size_t)snprintf(ways + len, sizeof ways - len, "%sTCP clients may "
			    "submit (%s%s)", len > 0 ? "; " : "", listeners[i] + 4,
			    current != NULL && current->tcp_open ? ", tcp_auth = none" : ", with a token");
		else if (strncmp(listeners[i], "unix ", 5) == 0 && stat(listeners[i] + 5, &st) == 0) {
			if (st.st_mode & S_IWOTH)
				len += (size_t)snprintf(ways + len, sizeof ways - len, "%severy local "
				    "user may connect to %s (mode %04o)", len > 0 ? "; " : "",
				    listeners[i] + 5, (unsigned)(st.st_mode & 07777));
			else if ((st.st_mode & S_IWGRP) && st.st_gid != 0)
				len += (size_t)snprintf(ways + len, sizeof ways - len, "%sthe group %s "
				    "may connect to %s", len > 0 ? "; " : "",
				    (gr = getgrgid(st.st_gid)) != NULL ? gr->gr_name : "?",
				    listeners[i] + 5);
		}
	}
	if (len == 0)
		return;
	for (size_t i = 0; i < c->npools; i++)
		if (c->pools[i].run_as == CONF_RUN_AS_DAEMON)
			exposure_warn("tpd runs as root and pool %s runs its tasks as root "
			    "(run_as = daemon), while %s: each of them runs commands as root; set "
			    "run_as = caller in [pool %s] (a task runs as its Unix client), or run "
			    "tpd as a user of its own", c->pools[i].name, ways, c->pools[i].name);
}

size_t
auth_warnings(const char *const **out)
{
	*out = (const char *const *)warnings;
	return nwarnings;
}

int
auth_load(const struct conf *c, struct auth **out, char **cause)
{
	struct auth *a = calloc(1, sizeof *a);

	*out = NULL;
	if (a == NULL)
		return cause_set(cause, "out of memory");
	if (tokens_load_files(c->token_file, c->admin_token_file, &a->tokens, cause) == -1) {
		free(a);
		return -1;
	}
	a->tcp_open = c->tcp_auth_none;
	if (c->admin_group != NULL) {
		struct group *gr = getgrnam(c->admin_group);
		if (gr == NULL) {
			auth_free(a);
			return cause_set(cause, "admin_group %s: no such group", c->admin_group);
		}
		a->have_admin_gid = true;
		a->admin_gid = gr->gr_gid;
		if ((a->admin_group = strdup(c->admin_group)) == NULL) {
			auth_free(a);
			return cause_set(cause, "out of memory");
		}
	}
	*out = a;
	return 0;
}

void
auth_install(struct auth *a)
{
	if (a->tokens != NULL)
		log_info("TCP tokens: %zu with the submit role, %zu with the admin role",
		    tokens_count(a->tokens, TOKENS_SUBMIT), tokens_count(a->tokens, TOKENS_ADMIN));
	auth_free(current);
	current = a;
}

int
auth_check_tcp(const struct auth *a, const char *listener, bool warn, char **cause)
{
	if (a == NULL)
		a = current;
	if (a != NULL && a->tcp_open) {
		if (warn)
			log_warnx("%s: tcp_auth = none: anyone who can connect may submit "
			    "tasks, without a token", listener);
		return 0;
	}
	if (a != NULL && a->tokens != NULL)
		return 0;
	return cause_set(cause, "%s: a TCP listener needs a token: set [daemon] token_file "
	    "(or tcp_auth = none to let anyone who can connect in)", listener);
}

const char *
auth_tcp_mode(void)
{
	return current != NULL && current->tcp_open ? TCP_AUTH_NONE : TCP_AUTH_TOKEN;
}

void
auth_free(struct auth *a)
{
	if (a == NULL)
		return;
	tokens_free(a->tokens);
	free(a->admin_group);
	free(a);
}

void
auth_free_all(void)
{
	auth_free(current);
	current = NULL;
	for (size_t i = 0; i < nwarnings; i++)
		free(warnings[i]);
	nwarnings = 0;
}

const char *
auth_role_name(enum conn_role role)
{
	return role == CONN_ROLE_ADMIN ? ROLE_ADMIN : ROLE_SUBMIT;
}

/* True when a Unix peer is in the admin group (primary or supplementary). */
static bool
peer_in_admin_group(const struct conn *c)
{
	gid_t groups[256], gid;
	socklen_t len = sizeof groups;

	if (current == NULL || !current->have_admin_gid || !conn_creds(c, NULL, &gid, NULL))
		return false;
	if (gid == current->admin_gid)
		return true;
	if (getsockopt(conn_fd(c), SOL_SOCKET, SO_PEERGROUPS, groups, &len) == -1)
		return false;
	for (size_t i = 0; i < len / sizeof groups[0]; i++)
		if (groups[i] == current->admin_gid)
			return true;
	return false;
}

enum conn_role
auth_initial_role(const struct conn *c)
{
	uid_t uid;

	if (!conn_is_unix(c))
		return current != NULL && (current->tcp_open || current->tokens == NULL) ?
		    CONN_ROLE_SUBMIT : CONN_ROLE_NONE;
	if (conn_creds(c, &uid, NULL, NULL) && (uid == 0 || uid == geteuid()))
		return CONN_ROLE_ADMIN;
	/* Group membership (SO_PEERGROUPS) is looked up only when an admin op comes. */
	return CONN_ROLE_SUBMIT;
}

int
auth_hello(struct conn *c, const char *token, const char *client, const char **code,
    char *msg, size_t len)
{
	const char *token_name = NULL;
	enum tokens_role token_role;

	if (token != NULL && !conn_is_unix(c)) {
		/* compared with every token in constant time (tokens_match) */
		if (current == NULL || !tokens_match(current->tokens, token, strlen(token),
		    &token_name, &token_role)) {
			log_notice("connection %llu (%s): hello refused: a token that is not "
			    "accepted", (unsigned long long)conn_id(c), conn_peer(c));
			*code = ERR_UNAUTHENTICATED;
			snprintf(msg, len, "token not accepted");
			return -1;
		}
		conn_set_role(c, token_role == TOKENS_ADMIN ? CONN_ROLE_ADMIN : CONN_ROLE_SUBMIT);
		conn_set_token_name(c, token_name);     /* its tasks' owner: token:NAME */
	}
	if (conn_role(c) == CONN_ROLE_NONE) {
		log_notice("connection %llu (%s): hello refused: no token",
		    (unsigned long long)conn_id(c), conn_peer(c));
		*code = ERR_UNAUTHENTICATED;
		snprintf(msg, len, "this TCP listener needs a token: send hello with \"token\"");
		return -1;
	}
	if (conn_role(c) == CONN_ROLE_SUBMIT && conn_is_unix(c) && peer_in_admin_group(c))
		conn_set_role(c, CONN_ROLE_ADMIN);
	if (token_name != NULL) {
		char q[UTF8_QUOTE_SIZE];
		/* the token's name, never the token */
		log_info("connection %llu (%s): hello with token %s, role %s%s%s",
		    (unsigned long long)conn_id(c), conn_peer(c), token_name,
		    auth_role_name(conn_role(c)), client != NULL ? ", client " : "",
		    client != NULL ? utf8_quote(q, client) : "");
	} else if (client != NULL)
		log_debug("connection %llu (%s) is %s", (unsigned long long)conn_id(c),
		    conn_peer(c), client);
	return 0;
}

bool
auth_allowed(struct conn *c, enum conn_role needs, const char *op, const char **code,
    char *msg, size_t len)
{
	const char *group = current != NULL ? current->admin_group : NULL;
	uid_t uid = 0;

	if (needs == CONN_ROLE_NONE || conn_role(c) >= needs)
		return true;
	if (conn_role(c) == CONN_ROLE_NONE) {
		*code = ERR_UNAUTHENTICATED;
		utf8_format(msg, len, "op \"%s\" needs authentication: first send "
		    "{\"op\":\"hello\",\"token\":\"...\"} with your token in its \"token\" "
		    "(tpctl: --token-file FILE)", op);
		return false;
	}
	if (conn_is_unix(c) && peer_in_admin_group(c)) {
		conn_set_role(c, CONN_ROLE_ADMIN);
		return true;
	}
	*code = ERR_FORBIDDEN;
	log_info("connection %llu (%s): %s forbidden: for admins",
	    (unsigned long long)conn_id(c), conn_peer(c), op);
	if (conn_is_unix(c)) {
		conn_creds(c, &uid, NULL, NULL);
		utf8_format(msg, len, "op \"%s\" is for admins: root, uid %u%s%s (you are uid %u)",
		    op, (unsigned)geteuid(), group != NULL ? " or group " : "",
		    group != NULL ? group : "", (unsigned)uid);
	} else
		utf8_format(msg, len, "op \"%s\" over TCP needs the admin token in hello%s", op,
		    current != NULL && tokens_count(current->tokens, TOKENS_ADMIN) > 0 ?
		    " (tpctl: --token-file with an admin token)" :
		    ", and none is configured (admin_token_file)");
	return false;
}

bool
auth_may_see_task(struct conn *c, const struct task *t)
{
	char owner[CONN_OWNER_MAX];

	if (conn_role(c) == CONN_ROLE_ADMIN)
		return true;
	/* a Unix peer without credentials is nobody's; redis:NAME is nobody's either */
	if (t->owner != NULL && (!conn_is_unix(c) || conn_creds(c, NULL, NULL, NULL)) &&
	    strcmp(t->owner, conn_owner(c, owner, sizeof owner)) == 0)
		return true;
	if (conn_is_unix(c) && peer_in_admin_group(c)) {
		conn_set_role(c, CONN_ROLE_ADMIN);
		return true;
	}
	return false;
}

bool
auth_task_allowed(struct conn *c, const struct task *t, const char *op, const char **code,
    char *msg, size_t len)
{
	char owner[CONN_OWNER_MAX];

	if (auth_may_see_task(c, t))
		return true;
	/* the log is the admin's: it names both sides; the answer names neither */
	log_info("connection %llu (%s, %s): %s task %llu forbidden: owned by %s",
	    (unsigned long long)conn_id(c), conn_peer(c), conn_owner(c, owner, sizeof owner),
	    op, (unsigned long long)t->id, t->owner != NULL ? t->owner : "nobody");
	*code = ERR_FORBIDDEN;
	snprintf(msg, len, "task %llu is not yours: op \"%s\" on a task is for its owner and "
	    "admins", (unsigned long long)t->id, op);
	return false;
}
