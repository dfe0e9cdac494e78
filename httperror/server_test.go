package httperror

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestClassifyNeverQuotesTheError(t *testing.T) {
	const secret = "Bearer s3cr3t"
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{&fasthttp.ErrSmallBuffer{}, 431, "header_too_large"},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), 408, "timeout"},
		{fasthttp.ErrBodyTooLarge, 413, "body_too_large"},
		{fmt.Errorf("chunk %s: %w", secret, fasthttp.ErrBrokenChunk{}), 400, "bad_chunked_encoding"},
		{fmt.Errorf("headers %s: %w", secret, io.ErrUnexpectedEOF), 400, "bad_request"},
		{errors.New("cannot parse Content-Length: " + secret), 400, "bad_request"},
	} {
		e := Classify(tc.err)
		if e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, e.Status, e.Code, tc.status, tc.code)
		}
		if strings.Contains(e.Message, "s3cr3t") {
			t.Errorf("%v: the message quotes the error: %q", tc.err, e.Message)
		}
	}
}

func TestServerErrorHandlerAnswersAndLogsNoSecret(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var ctx fasthttp.RequestCtx
	ServerErrorHandler(log, nil)(&ctx, errors.New(`error when reading request headers: "Authorization: Bearer s3cr3t"`))
	body := string(ctx.Response.Body())
	if ctx.Response.StatusCode() != 400 || body != `{"error":{"code":"bad_request","message":"malformed request"}}` {
		t.Errorf("answer %d %s", ctx.Response.StatusCode(), body)
	}
	if !ctx.Response.ConnectionClose() {
		t.Error("the connection is kept open after a malformed request")
	}
	Logger{Log: log}.Printf("error when serving connection %q<->%q: %v", "a", "b", "Bearer s3cr3t")
	if strings.Contains(logBuf.String(), "s3cr3t") || !strings.Contains(logBuf.String(), "code=bad_request") {
		t.Errorf("log:\n%s", logBuf.String())
	}
}
