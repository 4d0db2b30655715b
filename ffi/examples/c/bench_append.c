/* Appends/s through ds_append: THREADS threads share one client, each appending 256-byte
 * events to its own session for SECONDS, each waiting for its append to be durable.
 * Run: ./bench_append SOCKET THREADS SECONDS  -> prints "appends/s N" */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstream.h"

static ds_client *client;
static double seconds;
static char event[512];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *worker(void *arg) {
    long id = (long)arg, n = 0;
    char session[64];
    snprintf(session, sizeof session, "c-bench-%ld", id);
    double end = now() + seconds;
    while (now() < end) {
        if (ds_append(client, session, event, NULL) != DS_OK) return (void *)-1L;
        n++;
    }
    return (void *)n;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_append SOCKET THREADS SECONDS\n");
        return 2;
    }
    int threads = atoi(argv[2]);
    seconds = atof(argv[3]);
    char pad[200];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    snprintf(event, sizeof event, "{\"type\":\"bench.event\",\"payload\":{\"pad\":\"%s\"}}", pad);
    if (ds_client_connect(argv[1], &client) != DS_OK) return 1;
    pthread_t t[256];
    if (threads < 1 || threads > 256) return 2;
    double start = now();
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        void *n;
        pthread_join(t[i], &n);
        if ((long)n < 0) return 1;
        total += (long)n;
    }
    printf("appends/s %.0f\n", total / (now() - start));
    ds_client_free(client);
    return 0;
}
