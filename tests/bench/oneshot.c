/* The benchmark's yardstick for `dstream hook claude-code`: the least a one-shot client can
 * do for one hook event. Reads the event from stdin, connects to the daemon's Unix socket
 * (argv[1]), sends one `ingest` request, reads the reply line, and exits 0 if it is a result.
 * No parsing, no output: everything the hook does beyond this is its own cost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: oneshot SOCKET < event.json\n");
        return 2;
    }
    static char event[1 << 20];
    size_t len = fread(event, 1, sizeof event - 1, stdin);
    while (len > 0 && (event[len - 1] == '\n' || event[len - 1] == '\r')) len--;

    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return 1;

    static const char head[] =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ingest\",\"params\":{\"source\":\"claude-code\",\"event\":";
    if (write_all(fd, head, sizeof head - 1) || write_all(fd, event, len) || write_all(fd, "}}\n", 3))
        return 1;

    static char reply[1 << 16];
    size_t got = 0;
    while (got < sizeof reply - 1) {
        ssize_t r = read(fd, reply + got, sizeof reply - 1 - got);
        if (r <= 0) return 1;
        got += (size_t)r;
        if (memchr(reply, '\n', got)) break;
    }
    reply[got] = 0;
    close(fd);
    return strstr(reply, "\"result\"") ? 0 : 1;
}
