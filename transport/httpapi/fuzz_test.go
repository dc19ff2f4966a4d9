package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeCheck drives the decoder of /v1/check and /v1/peek bodies: it
// never panics; what it accepts names a policy and costs at least 1 for
// every item, with a key that is the body's own Unicode (invalid UTF-8 is
// refused, never replaced); what it refuses is a 4xx with a code, and only
// body_too_large is a 413.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{
		`{"policy":"api","key":"k"}`,
		`{"policy":"api","key":"k","cost":5}`,
		`{"requests":[{"policy":"api","key":"a"},{"policy":"strict","key":"b","cost":2}]}`,
		`{"requests":[]}`,
		`{}`,
		`null`,
		``,
		` `,
		`[]`,
		`"x"`,
		`{"policy":"api","key":"k"} {"policy":"api","key":"k"}`,
		`{"policy":"api","key":"k"}}`,
		`{"policy":"api","key":"k"} xyz`,
		`{"policy":"api","key":"k","weight":2}`,
		`{"requests":[{"policy":"api","key":"a","prio":1}]}`,
		`{"policy":"api","key":"k","cost":"5"}`,
		`{"policy":"api","key":42}`,
		`{"policy":"api","key":"k","cost":-1}`,
		`{"policy":"api","key":"k","cost":0}`,
		`{"policy":"api","key":"k","cost":9007199254740992}`,
		`{"policy":"api","key":"k","cost":99999999999999999999}`,
		`{"policy":"api","key":"k","cost":1e3}`,
		`{"policy":"api","key":"k","cost":null}`,
		`{"policy":"api","key":"k","requests":[{"policy":"api","key":"k"}]}`,
		`{"policy":"api","requests":null}`,
		`{"requests":[null,{"key":"b"}]}`,
		`{"requests":[["api"]]}`,
		`{"requests":{"policy":"api"}}`,
		`{"key":"k","cost":3}`,
		`{"policy":"\u0000\ud800","key":"\xff"}`,
		"{\"policy\":\"api\",\"key\":\"a\xffb\"}",
		`{"policy":"api","key":"\udc00"}`,
		`{"policy":"api","key":"\ud83d\ude00"}`,
		`{"policy":"api","key":"\ud83dx"}`,
		`{"policy":"api","key":"\\ud800"}`,
		`{"policy":"api","key":"\ufffd"}`,
		`{"policy":"api","key":"k","POLICY":"other"}`,
		`{"policy":"api",`,
		`{"requests":[{"policy":"api","key":"a"},`,
		`{"requests":[` + strings.Repeat(`{"policy":"p","key":"k"},`, 50) + `{"policy":"p","key":"k"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, e := decodeCheck(bytes.NewReader(body))
		if e != nil {
			if items != nil {
				t.Errorf("an error and items: %+v, %v", e, items)
			}
			if e.status < 400 || e.status > 499 || e.status == http.StatusRequestEntityTooLarge || e.code == "" || e.message == "" {
				t.Errorf("error %+v: want a 4xx other than 413 (the body has no limit here), with a code and message", e)
			}
			return
		}
		for i, it := range items {
			if it.Policy == "" {
				t.Errorf("item %d accepted without a policy: %+v", i, it)
			}
			if it.Cost < 1 {
				t.Errorf("item %d accepted with cost %d: %+v", i, it.Cost, it)
			}
			// A key is the body's Unicode, never a replacement of bytes
			// that were not: U+FFFD only where the body wrote it.
			if !utf8.ValidString(it.Key) || strings.ContainsRune(it.Key, utf8.RuneError) &&
				!bytes.ContainsRune(body, utf8.RuneError) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
				t.Errorf("item %d accepted with a key the body did not hold: %q", i, it.Key)
			}
		}
		// Through a body limit, the answer is the same unless the limit cut
		// the body, and then it is a 413.
		limit := int64(len(body) / 2)
		r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), limit)
		if _, e := decodeCheck(r); e == nil || e.status != http.StatusRequestEntityTooLarge {
			if len(bytes.TrimSpace(body)) > 0 {
				t.Errorf("a body of %d bytes through a limit of %d: %+v, want a 413", len(body), limit, e)
			}
		}
	})
}
