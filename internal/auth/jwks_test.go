package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func TestJWKSSelection(t *testing.T) {
	octSecret := randomSecret(48)
	rsaPub, ecPub := &rsaKey().PublicKey, &ecKey256().PublicKey
	cfg := Config{
		JWKSFile: writeJWKS(t,
			jwkOf(rsaPub, "rs-only", map[string]any{"alg": "RS256", "use": "sig"}),
			jwkOf(ecPub, "ec", map[string]any{"key_ops": []string{"verify"}}),
			jwkOf(&rsaKeyB().PublicKey, "enc", map[string]any{"use": "enc"}),
			jwkOf(&ecKey384().PublicKey, "no-verify", map[string]any{"key_ops": []string{"encrypt"}}),
			map[string]any{"kty": "oct", "kid": "hmac", "k": b64url([]byte(octSecret))},
			map[string]any{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
			jwkOf(&rsaKeyB().PublicKey, "rsa-oaep", map[string]any{"alg": "RSA-OAEP"}),
		),
		Now: fixedNow,
	}
	v := mustNew(t, cfg)
	rs := func(m jwt.SigningMethod, kid string) func(*testing.T) string {
		return func(t *testing.T) string { return sign(t, m, rsaKey(), goodClaims(), map[string]any{"kid": kid}) }
	}
	tests := []struct {
		name   string
		token  func(*testing.T) string
		stage  Stage  // "" means the token verifies
		detail string // what the error must say
	}{
		{"RS256 by kid", rs(jwt.SigningMethodRS256, "rs-only"), "", ""},
		{"ES256 by kid", func(t *testing.T) string {
			return sign(t, jwt.SigningMethodES256, ecKey256(), goodClaims(), map[string]any{"kid": "ec"})
		}, "", ""},
		{"ES256 without kid", func(t *testing.T) string {
			return sign(t, jwt.SigningMethodES256, ecKey256(), goodClaims(), nil)
		}, "", ""},
		{"unknown kid", rs(jwt.SigningMethodRS256, "rotated-away"), StageKey, `kid "rotated-away" names no RSA key for RS256 in auth.jwks_file`},
		{"kid of another family", rs(jwt.SigningMethodRS256, "ec"), StageKey, `kid "ec" names no RSA key`},
		{"a long kid is cut", rs(jwt.SigningMethodRS256, strings.Repeat("k", 500)), StageKey, `kid "` + strings.Repeat("k", 64) + `"... names no RSA key`},
		// The key says RS256; the same RSA key may not verify PS256 (no other key can either).
		{"PS256 on an RS256-only key", rs(jwt.SigningMethodPS256, "rs-only"), StageAlg, `alg "PS256" is not accepted`},
		{"kid of an encryption key", func(t *testing.T) string {
			return sign(t, jwt.SigningMethodRS256, rsaKeyB(), goodClaims(), map[string]any{"kid": "enc"})
		}, StageKey, `ignored: its use is "enc", not sig`},
		{"kid of a key without verify", func(t *testing.T) string {
			return sign(t, jwt.SigningMethodES384, ecKey384(), goodClaims(), map[string]any{"kid": "no-verify"})
		}, StageAlg, `alg "ES384" is not accepted`},
		// A symmetric key in a key set must never turn into an HMAC secret.
		{"HS256 signed with an oct key", func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, []byte(octSecret), goodClaims(), map[string]any{"kid": "hmac"})
		}, StageAlg, `alg "HS256" is not accepted`},
		{"kid of an encryption alg key", func(t *testing.T) string {
			return sign(t, jwt.SigningMethodRS256, rsaKeyB(), goodClaims(), map[string]any{"kid": "rsa-oaep"})
		}, StageKey, `its alg "RSA-OAEP" is not a signature alg`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token(t)
			if tt.stage == "" {
				if _, err := v.Verify(token); err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			wantFail(t, v, cfg, token, ReasonInvalid, tt.stage, tt.detail)
		})
	}
	ks := v.keys.Load()
	if got := len(ks.keys); got != 2 {
		t.Errorf("loaded %d keys, want 2 (the rest ignored)", got)
	}
	for _, kid := range []string{"enc", "no-verify", "hmac", "ed", "rsa-oaep"} {
		if _, ok := ks.ignored[kid]; !ok {
			t.Errorf("kid %q is not recorded as ignored", kid)
		}
	}
}

func TestReload(t *testing.T) {
	path := writeJWKS(t, jwkOf(&rsaKey().PublicKey, "old", nil))
	cfg := Config{JWKSFile: path, Now: fixedNow}
	v := mustNew(t, cfg)
	oldTok := sign(t, jwt.SigningMethodRS256, rsaKey(), goodClaims(), map[string]any{"kid": "old"})
	newTok := sign(t, jwt.SigningMethodRS256, rsaKeyB(), goodClaims(), map[string]any{"kid": "new"})

	write := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name      string
		file      any // nil leaves the file alone
		reloadErr bool
		oldOK     bool
		newOK     bool
	}{
		{"before reload", nil, false, true, false},
		{"rotated", map[string]any{"keys": []any{jwkOf(&rsaKeyB().PublicKey, "new", nil)}}, false, false, true},
		{"broken file keeps the keys", "not a key set", true, false, true},
		{"both", map[string]any{"keys": []any{jwkOf(&rsaKey().PublicKey, "old", nil), jwkOf(&rsaKeyB().PublicKey, "new", nil)}}, false, true, true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.file != nil {
				write(st.file)
				err := v.Reload()
				var ce *ConfigError
				if st.reloadErr != (err != nil) || (err != nil && !errors.As(err, &ce)) {
					t.Fatalf("Reload() = %v, want error: %v", err, st.reloadErr)
				}
			}
			if _, err := v.Verify(oldTok); (err == nil) != st.oldOK {
				t.Errorf("old key token: %v, want ok=%v", err, st.oldOK)
			}
			if _, err := v.Verify(newTok); (err == nil) != st.newOK {
				t.Errorf("new key token: %v, want ok=%v", err, st.newOK)
			}
		})
	}
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
