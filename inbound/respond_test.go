package inbound

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// appendJSONString must write exactly what encoding/json writes, so that
// answers and stored headers read as encoding/json's would.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []string{
		"", "evt_1PqR3sLkdIwHu7ixAbCdEf12", "invoice.paid", `quote " backslash \ slash /`,
		"<script>&amp;</script>", "\x00\x01\x07\b\f\n\r\t\x1f\x7f", "é ü 日本 🎉",
		"\u2028 line \u2029 para", "bad \xff utf8 \xc3", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 too big",
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("aZ09\"\\<>&\x00\x1f\x7f\xc3\xa9\xe2\x80\xa8\xa9\xff\xf0\x9f\x8e\x89 ")
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json gives %s", s, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("evt_1")
	f.Add("<\u2028\xff\"")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json gives %s", s, got, want)
		}
	})
}
