/* Append three events to a session and read them back.
 * Build: cc -I ffi/include append.c -L target/release -ldstream_ffi -o append
 * Run:   ./append [SOCKET] [SESSION] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstream.h"

static int fail(const char *what) {
    size_t n = ds_last_error(NULL, 0);
    char *msg = malloc(n ? n : 1);
    ds_last_error(msg, n);
    fprintf(stderr, "%s: %s\n", what, n ? msg : "(no message)");
    free(msg);
    return 1;
}

int main(int argc, char **argv) {
    const char *socket = argc > 1 ? argv[1] : NULL;
    const char *session = argc > 2 ? argv[2] : "c-example";
    ds_client *c = NULL;
    if (ds_client_connect(socket, &c) != DS_OK) return fail("connect");
    for (int i = 1; i <= 3; i++) {
        char event[128];
        snprintf(event, sizeof event, "{\"type\":\"example.note\",\"payload\":{\"n\":%d}}", i);
        uint64_t lsn = 0;
        if (ds_append(c, session, event, &lsn) != DS_OK) return fail("append");
        printf("appended lsn %llu\n", (unsigned long long)lsn);
    }
    char params[256];
    snprintf(params, sizeof params, "{\"session_id\":\"%s\"}", session);
    char *page = NULL;
    if (ds_client_call(c, "read", params, &page) != DS_OK) return fail("read");
    int count = 0;
    for (const char *p = page; (p = strstr(p, "\"type\":\"example.note\"")); p++) count++;
    printf("read back %d events\n", count);
    ds_string_free(page);
    ds_client_free(c);
    return count >= 3 ? 0 : 1;
}
