/*
 * kpsim-exectimer times one run of a program for kpsim and passes
 * everything else through.
 *
 * kpsim places it first in kube-proxy's PATH under a program's name (nft)
 * when kube-proxy runs that program in a way kpsim cannot time from Go:
 * upstream's nftables proxier creates its knftables.Interface itself. It
 * runs the program named by $KPSIM_EXECTIMER_<name> with the same argv,
 * standard streams and environment, waits for it, appends one JSON line to
 * $KPSIM_EXECTIMER_LOG and exits as the program did. proxier/exectimer.go
 * reads the log.
 *
 * It is C, linked statically, because its start-up cost lands in
 * kube-proxy's sync: about 0.5 ms here, against about 3 ms for the
 * smallest Go program. kpsim measures that cost in every run and reports
 * it beside the timings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* json_string appends s to f as a JSON string. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

int main(int argc, char **argv)
{
	char *name = basename(argv[0]);
	char var[256];
	snprintf(var, sizeof var, "KPSIM_EXECTIMER_%s", name);
	const char *real = getenv(var), *logpath = getenv("KPSIM_EXECTIMER_LOG");
	if (!real || !logpath) {
		fprintf(stderr, "kpsim-exectimer: run as %s, but %s or KPSIM_EXECTIMER_LOG is not set\n", name, var);
		return 127;
	}

	long long start = now_ns();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "kpsim-exectimer: fork: %s\n", strerror(errno));
		return 127;
	}
	if (pid == 0) {
		/* Killed with the timer, as it would be if kube-proxy had run it
		 * directly and killed it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(real, argv);
		fprintf(stderr, "kpsim-exectimer: %s: %s\n", real, strerror(errno));
		_exit(127);
	}
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "kpsim-exectimer: wait: %s\n", strerror(errno));
			return 127;
		}
	}
	long long end = now_ns();

	/* One write of the whole line under O_APPEND, so that concurrent runs
	 * do not interleave. */
	char *line = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&line, &len);
	if (f) {
		fprintf(f, "{\"start\":%lld,\"end\":%lld,\"args\":[", start, end);
		for (int i = 1; i < argc; i++) {
			if (i > 1)
				fputc(',', f);
			json_string(f, argv[i]);
		}
		fprintf(f, "],\"exit\":%d,\"signal\":%d,\"userUsec\":%lld,\"sysUsec\":%lld}\n",
			WIFEXITED(status) ? WEXITSTATUS(status) : -1,
			WIFSIGNALED(status) ? WTERMSIG(status) : 0,
			(long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
			(long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
		fclose(f);
		int fd = open(logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0) {
			if (write(fd, line, len) < 0) {
				/* Nothing to do: the run itself went through. */
			}
			close(fd);
		}
		free(line);
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
