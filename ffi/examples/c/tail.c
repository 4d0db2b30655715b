/* Follow a session with a subscription (its callback runs on the library's delivery thread)
 * while this thread appends: every event arrives once, in LSN order.
 * Run: ./tail [SOCKET] [SESSION] [COUNT] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dstream.h"

typedef struct {
    pthread_mutex_t lock;
    unsigned long long next; /* the LSN expected next */
    int out_of_order;
} feed;

static void on_event(void *user, const char *json, size_t len) {
    (void)len;
    feed *f = user;
    const char *p = strstr(json, "\"lsn\":");
    unsigned long long lsn = p ? strtoull(p + 6, NULL, 10) : 0;
    pthread_mutex_lock(&f->lock);
    if (lsn != f->next) f->out_of_order++;
    f->next = lsn + 1;
    pthread_mutex_unlock(&f->lock);
}

int main(int argc, char **argv) {
    const char *socket = argc > 1 ? argv[1] : NULL;
    const char *session = argc > 2 ? argv[2] : "c-tail";
    int count = argc > 3 ? atoi(argv[3]) : 200;
    ds_client *c = NULL;
    if (ds_client_connect(socket, &c) != DS_OK) {
        fprintf(stderr, "connect failed\n");
        return 1;
    }
    feed f = {PTHREAD_MUTEX_INITIALIZER, 1, 0};
    uint64_t sub = 0;
    if (ds_subscribe(c, session, 1, on_event, &f, &sub) != DS_OK) {
        fprintf(stderr, "subscribe failed\n");
        return 1;
    }
    for (int i = 0; i < count; i++) {
        if (ds_append(c, session, "{\"type\":\"example.tick\"}", NULL) != DS_OK) {
            fprintf(stderr, "append %d failed\n", i);
            return 1;
        }
    }
    /* Wait (at most 20 s) for the feed to catch up. */
    for (int waited = 0; waited < 2000; waited++) {
        pthread_mutex_lock(&f.lock);
        unsigned long long next = f.next;
        pthread_mutex_unlock(&f.lock);
        if (next > (unsigned long long)count) break;
        struct timespec ten_ms = {0, 10 * 1000 * 1000};
        nanosleep(&ten_ms, NULL);
    }
    if (ds_unsubscribe(c, sub) != DS_OK) return 1;
    printf("received %llu events, %d out of order\n", f.next - 1, f.out_of_order);
    ds_client_free(c);
    return f.next - 1 == (unsigned long long)count && f.out_of_order == 0 ? 0 : 1;
}
