package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgatehq/floodgate/config"
)

// TestBudgets: budgets.token_key is 32+ bytes, or a file of one; never
// both; none is no key (the service draws one per process). Errors name
// the field and the length, never the key.
func TestBudgets(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	parse := func(body string) (*config.Config, error) {
		return config.Parse(config.Source{Name: "f.yaml", Data: []byte(body)})
	}
	cfg, err := parse("budgets:\n  token_key: \"" + key + "\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := cfg.Budgets.TokenKeyBytes(); err != nil || string(b) != key {
		t.Errorf("token_key: %q %v", b, err)
	}
	_, err = parse("budgets:\n  token_key: \"short-secret-key\"\n")
	if err == nil || !strings.Contains(err.Error(), "budgets.token_key: a key of 16 bytes; want at least 32") || strings.Contains(err.Error(), "short-secret-key") {
		t.Errorf("a short token_key: %v", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = parse("budgets:\n  token_key: \"" + key + "\"\n  token_key_file: " + file + "\n")
	if err == nil || !strings.Contains(err.Error(), "give budgets.token_key or budgets.token_key_file, not both") {
		t.Errorf("both: %v", err)
	}
	cfg, err = parse("budgets:\n  token_key_file: " + file + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := cfg.Budgets.TokenKeyBytes(); err != nil || string(b) != key {
		t.Errorf("token_key_file: %q %v", b, err)
	}
	if err := os.WriteFile(file, []byte("tiny-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Budgets.TokenKeyBytes(); err == nil || !strings.Contains(err.Error(), "a key of 11 bytes; want at least 32") || strings.Contains(err.Error(), "tiny-secret") {
		t.Errorf("a short key file: %v", err)
	}
	cfg, err = parse("policies: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := cfg.Budgets.TokenKeyBytes(); b != nil || err != nil {
		t.Errorf("no key: %q %v", b, err)
	}
}
