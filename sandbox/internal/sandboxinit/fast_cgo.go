//go:build linux && cgo

package sandboxinit

// The init's fast path: the same steps as run, in C, in an ELF constructor
// that the dynamic loader runs before the Go runtime starts. A start then
// pays for loading the binary, not for the Go runtime and package
// initialisation (about 3 ms of the 3.5 an exec of the init costs).
//
// It handles only a configuration it reads exactly as Decode does, and
// reads it with MSG_PEEK first: anything else (a key it does not know, a
// boolean spelled otherwise, a bad rlimit) it leaves on the socket, and
// returns, so that the Go init reads and refuses it with Decode's message.
// Once it consumed the configuration it never returns: it execs the command
// or exits with run's codes and messages.

/*
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TG_PATH "/run/termgate/init"
#define TG_CTL 3
#define TG_MAX_CONFIG (128 << 10)
#define TG_NOT_FOUND 127
#define TG_FAILED 126
#define TG_MAX_RLIMITS 16
#define TG_OPEN_FILES 1024

static char tg_buf[TG_MAX_CONFIG + 2];
static char tg_msg[8192];

struct tg_config {
	const char *cwd;
	int terminal, hold, landlock;
	int nrlim;
	int rres[TG_MAX_RLIMITS];
	unsigned long long rval[TG_MAX_RLIMITS];
	int nenv;
	char **env;
};

// tg_errtext is errno's text as Go's syscall.Errno prints it: glibc's,
// with a lower-case first letter.
static void tg_errtext(int err, char *out, size_t n) {
	const char *s = strerror(err);
	snprintf(out, n, "%s", s);
	out[0] = (char)tolower((unsigned char)out[0]);
}

// tg_fail tells the launcher why the command never ran, or the terminal,
// and exits with code, as fail does.
static void tg_fail(int code, const char *msg) {
	char out[sizeof tg_msg + 32];
	int n = snprintf(out, sizeof out, "%s%s", code == TG_NOT_FOUND ? "error:not-found:" : "error:", msg);
	if (write(TG_CTL, out, (size_t)n) < 0) {
		(void)!write(2, "termgate-init: ", 15);
		(void)!write(2, msg, strlen(msg));
		(void)!write(2, "\n", 1);
	}
	_exit(code);
}

static void tg_fail_errno(int code, const char *what, int err) {
	char e[256];
	tg_errtext(err, e, sizeof e);
	snprintf(tg_msg, sizeof tg_msg, "%s%s", what, e);
	tg_fail(code, tg_msg);
}

static int tg_bool(const char *v, int *out) {
	if (strcmp(v, "true") == 0) { *out = 1; return 0; }
	if (strcmp(v, "false") == 0) { *out = 0; return 0; }
	return -1;
}

// tg_uint parses decimal digits into *out, refusing overflow, signs and
// empty strings.
static int tg_uint(const char *s, const char *end, unsigned long long max, unsigned long long *out) {
	unsigned long long v = 0;
	if (s == end) return -1;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9') return -1;
		unsigned d = (unsigned)(*s - '0');
		if (v > (max - d) / 10) return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int tg_rlimit(struct tg_config *c, const char *v) {
	const char *eq = strchr(v, '=');
	unsigned long long res, val;
	if (eq == NULL || c->nrlim == TG_MAX_RLIMITS) return -1;
	if (tg_uint(v, eq, INT32_MAX, &res) < 0 || tg_uint(eq + 1, eq + 1 + strlen(eq + 1), UINT64_MAX, &val) < 0) return -1;
	c->rres[c->nrlim] = (int)res;
	c->rval[c->nrlim] = val;
	c->nrlim++;
	return 0;
}

// tg_parse reads n bytes of tg_buf as Decode would, pointing into it;
// -1 for anything Decode might read otherwise.
static int tg_parse(size_t n, struct tg_config *c) {
	if (n == 0 || tg_buf[n - 1] != '\0') return -1;
	int fields = 0;
	for (size_t i = 0; i < n; i++) fields += tg_buf[i] == '\0';
	if (fields % 2 != 0) return -1;
	c->env = calloc((size_t)fields / 2 + 1, sizeof(char *));
	if (c->env == NULL) return -1;
	for (char *p = tg_buf; p < tg_buf + n;) {
		char *k = p, *v = k + strlen(k) + 1;
		p = v + strlen(v) + 1;
		int bad = 0;
		if (strcmp(k, "cwd") == 0) c->cwd = v;
		else if (strcmp(k, "terminal") == 0) bad = tg_bool(v, &c->terminal);
		else if (strcmp(k, "hold") == 0) bad = tg_bool(v, &c->hold);
		else if (strcmp(k, "landlock") == 0) bad = tg_bool(v, &c->landlock);
		else if (strcmp(k, "rlimit") == 0) bad = tg_rlimit(c, v);
		else if (strcmp(k, "env") == 0 && strchr(v, '=') != NULL) c->env[c->nenv++] = v;
		else bad = -1;
		if (bad) return -1;
	}
	return c->cwd != NULL && c->cwd[0] != '\0' ? 0 : -1;
}

static void tg_session(const struct tg_config *c) {
	if (c->terminal) {
		if (setsid() < 0) tg_fail_errno(TG_FAILED, "new session: ", errno);
		if (ioctl(0, TIOCSCTTY, 0) < 0) tg_fail_errno(TG_FAILED, "controlling terminal: ", errno);
	}
	if (chdir(c->cwd) < 0) {
		char what[4200];
		snprintf(what, sizeof what, "cannot change directory to %s: ", c->cwd);
		tg_fail_errno(TG_FAILED, what, errno);
	}
}

static void tg_hold(void) {
	char b[16];
	if (write(TG_CTL, "ready", 5) < 0) tg_fail_errno(TG_FAILED, "report ready: ", errno);
	ssize_t n = read(TG_CTL, b, sizeof b);
	if (n != 2 || memcmp(b, "go", 2) != 0) tg_fail(TG_FAILED, "the launcher did not let the command start");
}

// tg_look finds name as lookCommand does, in the command's own PATH.
static char *tg_look(const char *name, const struct tg_config *c) {
	if (strchr(name, '/') != NULL) return (char *)name;
	const char *search = "/usr/bin:/bin";
	for (int i = 0; i < c->nenv; i++)
		if (strncmp(c->env[i], "PATH=", 5) == 0) search = c->env[i] + 5;
	int denied = 0;
	for (const char *dir = search;;) {
		const char *end = strchr(dir, ':');
		size_t dl = end ? (size_t)(end - dir) : strlen(dir);
		char *p = malloc(dl + strlen(name) + 3);
		if (p == NULL) tg_fail(TG_FAILED, "out of memory");
		if (dl == 0) strcpy(p, ".");
		else { memcpy(p, dir, dl); p[dl] = '\0'; }
		strcat(p, "/");
		strcat(p, name);
		struct stat st;
		if (stat(p, &st) == 0 && !S_ISDIR(st.st_mode)) {
			if (access(p, X_OK) == 0) return p;
			denied = 1;
		}
		free(p);
		if (end == NULL) break;
		dir = end + 1;
	}
	snprintf(tg_msg, sizeof tg_msg, "%s: %s", name, denied ? "permission denied" : "command not found");
	tg_fail(TG_NOT_FOUND, tg_msg);
	return NULL;
}

// tg_landlock is enterLandlockDomain.
static void tg_landlock(void) {
	uint64_t handled = (1 << 6) | (1 << 11);
	long fd = syscall(444, &handled, sizeof handled, 0);
	if (fd < 0) tg_fail_errno(TG_FAILED, "landlock ruleset: ", errno);
	if (syscall(446, fd, 0, 0) < 0) tg_fail_errno(TG_FAILED, "landlock domain: ", errno);
	close((int)fd);
}

// tg_ksigaction is the kernel's struct sigaction, large enough for every
// architecture's layout: the handler comes first in all of them, and an
// all-zero one is SIG_DFL with no flags and an empty mask.
struct tg_ksigaction {
	unsigned long handler, rest[3];
};

// tg_signals leaves the command the signals the Go init would: none
// blocked, and none ignored but SIGHUP and SIGINT, whose inherited SIG_IGN
// the Go runtime keeps (it installs its own handler for every other, which
// the exec resets). It asks the kernel directly: glibc's sigaction refuses
// the two signals it reserves for itself (32 and 33), which a parent may
// still have left ignored.
static void tg_signals(void) {
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig <= 64; sig++) {
		struct tg_ksigaction old = {0}, dfl = {0};
		if (sig == SIGHUP || sig == SIGINT || sig == SIGKILL || sig == SIGSTOP) continue;
		if (syscall(SYS_rt_sigaction, sig, NULL, &old, 8) < 0 || old.handler != (unsigned long)SIG_IGN) continue;
		syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);
	}
}

// tg_exec is execCommand: rlimits, then exec. Its failures read as run's,
// "exec NAME: " and the reason.
static void tg_exec(const char *path, char **argv, const struct tg_config *c) {
	char what[4200];
	int n = snprintf(what, sizeof what, "exec %s: ", argv[0]);
	fcntl(TG_CTL, F_SETFD, FD_CLOEXEC);
	int nofile = 0;
	for (int i = 0; i < c->nrlim; i++) nofile |= c->rres[i] == RLIMIT_NOFILE;
	if (!nofile) {
		struct rlimit lim;
		if (getrlimit(RLIMIT_NOFILE, &lim) < 0) {
			snprintf(what + n, sizeof what - (size_t)n, "read open-files limit: ");
			tg_fail_errno(TG_FAILED, what, errno);
		}
		lim.rlim_cur = lim.rlim_max < TG_OPEN_FILES ? lim.rlim_max : TG_OPEN_FILES;
		if (setrlimit(RLIMIT_NOFILE, &lim) < 0) tg_fail_errno(errno == ENOENT ? TG_NOT_FOUND : TG_FAILED, what, errno);
	}
	for (int i = 0; i < c->nrlim; i++) {
		struct rlimit lim = {c->rval[i], c->rval[i]};
		if (setrlimit(c->rres[i], &lim) < 0) {
			snprintf(what + n, sizeof what - (size_t)n, "set rlimit %d: ", c->rres[i]);
			tg_fail_errno(TG_FAILED, what, errno);
		}
	}
	tg_signals();
	execve(path, argv, c->env);
	int err = errno;
	tg_fail_errno(err == ENOENT ? TG_NOT_FOUND : TG_FAILED, what, err);
}

__attribute__((constructor)) static void termgate_fast_init(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 2 || strcmp(argv[0], TG_PATH) != 0) return;
	ssize_t n = recv(TG_CTL, tg_buf, TG_MAX_CONFIG + 1, MSG_PEEK);
	struct tg_config c = {0};
	if (n <= 0 || n > TG_MAX_CONFIG || tg_parse((size_t)n, &c) < 0) return; // the Go init decides
	if (recv(TG_CTL, tg_buf, TG_MAX_CONFIG + 1, 0) != n) tg_fail(TG_FAILED, "read configuration: the message changed");
	tg_session(&c);
	if (c.hold) tg_hold();
	char *path = tg_look(argv[1], &c);
	if (c.landlock) tg_landlock();
	tg_exec(path, argv + 1, &c);
}
*/
import "C"

// cgoInit says the fast path is built in.
const cgoInit = true
