package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckToken(t *testing.T) {
	for tok, ok := range map[string]bool{
		"":                                 false,
		"short":                            false,
		"0123456789abcde":                  false, // 15
		"0123456789abcdef":                 true,  // 16
		"Zm9vYmFyYmF6cXV4Cg==":             true,
		"a-b_c.d~e+f/g=h:i!j@k#0123":       true,
		"0123456789 abcdef":                false, // a space
		"0123456789abcdef\n":               false,
		"0123456789abcdef\x00":             false,
		"0123456789abcdéf":                 false,
		strings.Repeat("x", MaxTokenLen):   true,
		strings.Repeat("x", MaxTokenLen+1): false,
	} {
		err := CheckToken(tok)
		if (err == nil) != ok {
			t.Errorf("CheckToken(%q): %v, want ok=%v", tok, err, ok)
		}
		if err != nil {
			if !errors.Is(err, ErrWeakToken) {
				t.Errorf("CheckToken(%q): %v does not wrap ErrWeakToken", tok, err)
			}
			if len(tok) > 3 && strings.Contains(err.Error(), tok[:4]) {
				t.Errorf("CheckToken(%q): the error %q repeats the token", tok, err)
			}
		}
	}
	if err := CheckToken("short"); err == nil || !strings.Contains(err.Error(), "5 characters, want at least 16") {
		t.Errorf("CheckToken(short): %v", err)
	}
}

func TestBearer(t *testing.T) {
	for field, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer abc":    "abc",
		"BEARER abc":    "abc",
		"bEaReR abc":    "abc",
		"Bearer   abc":  "abc",
		"Bearer abc ":   "abc ", // compared as given: no such token
		"Bearer":        "",
		"Bearer ":       "",
		"Bearerabc":     "",
		"Basic abc":     "",
		"":              "",
		" Bearer abc":   "",
		"Bearer\tabc":   "",
		"Token abc def": "",
	} {
		got, ok := Bearer(field)
		if got != want || ok != (want != "") {
			t.Errorf("Bearer(%q) = %q, %v; want %q", field, got, ok, want)
		}
	}
}

func TestToken(t *testing.T) {
	tok := NewToken("0123456789abcdef")
	if !tok.Equal("0123456789abcdef") || tok.Equal("0123456789abcdeF") || tok.Equal("0123456789abcdef0") || tok.Equal("") || tok.IsZero() {
		t.Error("Token.Equal compares wrongly")
	}
	var zero Token
	if zero.Equal("") || !zero.IsZero() || NewToken("") != zero {
		t.Error("the zero Token matches")
	}
}

func TestParseClients(t *testing.T) {
	set, err := ParseClients([]byte("# team tokens\n\nalice  alice-token-0123456789\n\tbob\tbob-token-0123456789ab  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 2 {
		t.Fatalf("%d clients", len(set))
	}
	const secret = "secret-token-0123456789"
	for _, c := range []struct{ text, want string }{
		{"alice " + secret + " extra\n", "line 1: want NAME TOKEN, found 3 fields"},
		{"\n\nalice\n", "line 3: want NAME TOKEN, found 1 fields"},
		{"alice short\n", "line 1: client alice: token: 5 characters, want at least 16"},
		{"al/ice " + secret + "\n", `line 1: name "al/ice": want letters`},
		{"admin " + secret + "\n", `line 1: name "admin" is reserved`},
		{"mtls " + secret + "\n", `line 1: name "mtls" is reserved`},
		{strings.Repeat("n", MaxClientName+1) + " " + secret + "\n", "line 1: name of 65 bytes"},
		{"a " + secret + "\nb x" + secret + "\na y" + secret + "\n", "line 3: client a is on line 1 already"},
		{"a " + secret + "\nb " + secret + "\n", "line 2: client b has the token of client a"},
	} {
		_, err := ParseClients([]byte(c.text))
		if err == nil || !errors.Is(err, ErrClientsFile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseClients(%q): %v, want %q", c.text, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "token-0123") {
			t.Errorf("ParseClients(%q): the error %q holds a token", c.text, err)
		}
	}
	var b strings.Builder
	for i := 0; i <= MaxClients; i++ {
		b.WriteString("c")
		b.WriteString(strings.Repeat("0", 6-len(itoa(i))) + itoa(i))
		b.WriteString(" token-" + strings.Repeat("0", 12-len(itoa(i))) + itoa(i) + "\n")
	}
	if _, err := ParseClients([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than 10000 clients") {
		t.Errorf("%d clients: %v", MaxClients+1, err)
	}
}

func itoa(i int) string {
	s := ""
	for {
		s = string(rune('0'+i%10)) + s
		if i /= 10; i == 0 {
			return s
		}
	}
}

func TestClients(t *testing.T) {
	var zero *Clients
	if zero.Enabled() {
		t.Error("a nil Clients is enabled")
	}
	if _, ok := zero.Lookup("x"); ok {
		t.Error("a nil Clients knows a token")
	}
	path := filepath.Join(t.TempDir(), "clients")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("alice alice-token-0123456789\n")
	c := &Clients{}
	if c.Enabled() {
		t.Error("a zero Clients is enabled")
	}
	if err := c.Load(path); err != nil {
		t.Fatal(err)
	}
	if name, ok := c.Lookup("alice-token-0123456789"); !c.Enabled() || !ok || name != "alice" {
		t.Errorf("Lookup(alice's token) = %q %v", name, ok)
	}
	if _, ok := c.Lookup("alice-token-012345678"); ok {
		t.Error("a prefix of a token is known")
	}
	if changed, err := c.Refresh(); changed || err != nil {
		t.Errorf("Refresh of an unchanged file: %v %v", changed, err)
	}
	write("alice alice-token-0123456789\nbob bob-token-0123456789ab\n")
	if changed, err := c.Refresh(); !changed || err != nil {
		t.Errorf("Refresh of a changed file: %v %v", changed, err)
	}
	if got := strings.Join(c.Names(), ","); got != "alice,bob" {
		t.Errorf("Names = %s", got)
	}
	// A broken file keeps the tokens in force.
	write("bob short\n")
	if changed, err := c.Refresh(); changed || err == nil {
		t.Errorf("Refresh of a broken file: %v %v", changed, err)
	}
	if _, ok := c.Lookup("bob-token-0123456789ab"); !ok {
		t.Error("a broken file took bob's token away")
	}
	write("# nobody\n")
	if err := c.Load(path); err == nil || !strings.Contains(err.Error(), "no client") {
		t.Errorf("Load of an empty file: %v", err)
	}
	if err := c.Load(filepath.Join(t.TempDir(), "missing")); err == nil || !c.Enabled() || c.Path() != path {
		t.Errorf("Load of a missing file: %v; enabled %v, path %q", err, c.Enabled(), c.Path())
	}
	if err := c.Load(""); err != nil || c.Enabled() || c.Path() != "" {
		t.Errorf("Load(\"\"): %v, enabled %v", err, c.Enabled())
	}
	if changed, err := c.Refresh(); changed || err != nil {
		t.Errorf("Refresh without a file: %v %v", changed, err)
	}
}
