/*
 * reload.h: SIGHUP (reload.c): the configuration file read again and
 * applied, what a reload may change, in place. Called by tpd.c's signal
 * handler. Loop thread only.
 */
#ifndef TPD_RELOAD_H
#define TPD_RELOAD_H

/* Re-reads the configuration file and applies it; a bad file changes nothing. */
void daemon_reload(void);

#endif
