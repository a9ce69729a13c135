/*
 * The pod sandbox's first process (containerd's sandbox_image): holds the pod's namespaces open, reaps the
 * orphans a shared PID namespace hands it, and exits cleanly when the runtime stops the pod.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal_number) {
    (void)signal_number;
    _exit(0);
}

static void reap(int signal_number) {
    (void)signal_number;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction action = {0};
    action.sa_handler = stop;
    if (sigaction(SIGINT, &action, NULL) || sigaction(SIGTERM, &action, NULL)) return EXIT_FAILURE;
    action.sa_handler = reap;
    action.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &action, NULL)) return EXIT_FAILURE;
    for (;;) pause();
}
