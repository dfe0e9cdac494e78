package gatewaytest

import (
	"bufio"
	"net"
	"net/http"
	"testing"
)

// RawServer answers each HTTP request with the bytes answer gives for its
// path, as they are (a malformed answer too), then closes the connection.
// It returns the server's base URL and stops when the test ends.
func RawServer(t testing.TB, answer func(path string) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = c.Write(answer(req.URL.Path))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
