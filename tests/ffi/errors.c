/* Every error path of the C ABI returns its documented code and a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstream.h"

static int failures = 0;

static void expect(const char *what, ds_result got, ds_result want, const char *in_message) {
    size_t n = ds_last_error(NULL, 0);
    char msg[512] = {0};
    size_t copied = ds_last_error(msg, sizeof msg);
    int ok = got == want && n == copied && (in_message == NULL || strstr(msg, in_message));
    printf("%s %s: code %u, message \"%s\"\n", ok ? "ok  " : "FAIL", what, (unsigned)got, msg);
    if (!ok) failures++;
}

int main(int argc, char **argv) {
    const char *live = argv[1];    /* a running daemon's socket */
    const char *missing = argv[2]; /* a path where nothing listens */
    (void)argc;
    ds_client *c = NULL;
    expect("connect, no daemon", ds_client_connect(missing, &c), DS_ERR_CONNECT, "no dstream daemon");
    expect("connect, NULL out", ds_client_connect(live, NULL), DS_ERR_NULL, "out is NULL");
    if (ds_client_connect(live, &c) != DS_OK) return 1;
    uint64_t lsn = 0;
    expect("append, NULL client", ds_append(NULL, "s", "{\"type\":\"x\"}", &lsn), DS_ERR_NULL, "client is NULL");
    expect("append, NULL session", ds_append(c, NULL, "{\"type\":\"x\"}", &lsn), DS_ERR_NULL, "session_id is NULL");
    expect("append, invalid UTF-8", ds_append(c, "s\xff", "{\"type\":\"x\"}", &lsn), DS_ERR_UTF8, "UTF-8");
    expect("append, not JSON", ds_append(c, "s", "{nope", &lsn), DS_ERR_JSON, "event_json");
    expect("append, bad session id", ds_append(c, "../etc", "{\"type\":\"x\"}", &lsn), DS_ERR_RPC, "-32001");
    char *out = NULL;
    expect("call, unknown method", ds_client_call(c, "no.such", NULL, &out), DS_ERR_RPC, "-32601");
    expect("call, NULL out", ds_client_call(c, "hello", NULL, NULL), DS_ERR_NULL, "output pointer");
    expect("subscribe, NULL callback", ds_subscribe(c, "s", 1, NULL, NULL, NULL), DS_ERR_NULL, "cb is NULL");
    expect("unsubscribe, unknown", ds_unsubscribe(c, 12345), DS_ERR_RPC, "no subscription");
    expect("await, unknown checkpoint", ds_checkpoint_await(c, "ck_none", 10, &out), DS_ERR_RPC, "-32010");
    expect("append, ok", ds_append(c, "errors-ok", "{\"type\":\"x\"}", &lsn), DS_OK, NULL);
    if (ds_last_error(NULL, 0) != 0) {
        printf("FAIL the last error is not cleared by a success\n");
        failures++;
    }
    ds_string_free(NULL);
    ds_client_free(NULL);
    ds_client_free(c);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
