package config

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MinTokenKey is the shortest budgets.token_key, in bytes.
const MinTokenKey = 32

// Budgets configures the reservations of the HTTP API (/v1/reserve and
// /v1/settle; docs/budgets.md, "HTTP tokens").
type Budgets struct {
	// TokenKey is the HMAC-SHA-256 key that signs reservation tokens, at
	// least MinTokenKey bytes (budgets.token_key). Every replica that may
	// settle a token must have the same. Empty, with no TokenKeyFile, means
	// a random key drawn by each process at start: its tokens cannot be
	// settled after a restart, nor by another replica.
	TokenKey string
	// TokenKeyFile names a file holding the key (budgets.token_key_file);
	// TokenKeyBytes reads it, at start and at every reload.
	TokenKeyFile string
}

// budgets reads the budgets section.
func (r *reader) budgets(n *yaml.Node, b *Budgets) {
	bf := r.section(n, "budgets")
	if v, ok := bf["token_key"]; ok {
		if s, ok := r.str(v.value, "budgets.token_key"); ok {
			if s != "" && len(s) < MinTokenKey {
				r.errorf(v.value, "budgets.token_key", "a key of %d bytes; want at least %d (or none: a random key per process)", len(s), MinTokenKey)
			}
			b.TokenKey = s
		}
	}
	if v, ok := bf["token_key_file"]; ok {
		b.TokenKeyFile, _ = r.str(v.value, "budgets.token_key_file")
		if b.TokenKey != "" && b.TokenKeyFile != "" {
			r.errorf(v.value, "budgets.token_key_file", "give budgets.token_key or budgets.token_key_file, not both")
		}
	}
}

// TokenKeyBytes returns the token key: TokenKey, else the content of
// TokenKeyFile (surrounding white space removed), else nil (no key
// configured). The error names the file and what is wrong, never the key.
func (b *Budgets) TokenKeyBytes() ([]byte, error) {
	if b.TokenKey != "" || b.TokenKeyFile == "" {
		if b.TokenKey == "" {
			return nil, nil
		}
		return []byte(b.TokenKey), nil
	}
	data, err := os.ReadFile(b.TokenKeyFile)
	if err != nil {
		return nil, fmt.Errorf("budgets.token_key_file: %w", err)
	}
	key := strings.TrimSpace(string(data))
	if len(key) < MinTokenKey {
		return nil, fmt.Errorf("budgets.token_key_file %s: a key of %d bytes; want at least %d", b.TokenKeyFile, len(key), MinTokenKey)
	}
	return []byte(key), nil
}
