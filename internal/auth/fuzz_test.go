package auth

import (
	"crypto/elliptic"
	"errors"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzVerify feeds Verify arbitrary strings, seeded with genuine tokens of every family. Verify
// must never panic; only a genuine token may verify; a failure is always an *Error that quotes
// neither the token nor a secret; and no forged token is ever told "expired".
//
// "Genuine" is the seeds themselves, plus for ES tokens the twin with s replaced by n-s: ECDSA
// accepts both halves of that pair, so the twin is the same signature by the same key over the
// same claims, not a forgery. (A token's identity is therefore its claims, never its bytes.)
func FuzzVerify(f *testing.F) {
	cfg := allKeysConfig(f)
	v := mustNew(f, cfg)
	claims := with(goodClaims(), "sub", "fuzz-user")
	genuine := map[string]bool{}
	add := func(token string) {
		genuine[token] = true
		f.Add(token)
	}
	add(sign(f, jwt.SigningMethodHS256, []byte(hsSecret()), claims, nil))
	add(sign(f, jwt.SigningMethodHS384, []byte(hsSecret()), claims, nil))
	add(sign(f, jwt.SigningMethodHS512, []byte(hsSecret64()), claims, map[string]any{"kid": "x"}))
	add(sign(f, jwt.SigningMethodRS256, rsaKey(), claims, nil))
	add(sign(f, jwt.SigningMethodPS256, rsaKeyB(), claims, map[string]any{"kid": "rsa-b"}))
	es256 := sign(f, jwt.SigningMethodES256, ecKey256(), claims, nil)
	add(es256)
	genuine[ecTwin(es256, elliptic.P256())] = true
	es384 := sign(f, jwt.SigningMethodES384, ecKey384(), claims, map[string]any{"kid": "ec-384"})
	add(es384)
	genuine[ecTwin(es384, elliptic.P384())] = true

	for token := range genuine {
		if _, err := v.Verify(token); err != nil {
			f.Fatalf("a genuine seed does not verify: %v", err)
		}
	}
	// Seeds that must fail, to start the fuzzer near the interesting refusals.
	f.Add("")
	f.Add("a.b.c")
	f.Add(rawToken(map[string]any{"alg": "none"}, claims, nil))
	f.Add(rawToken(map[string]any{"alg": "NONE", "kid": "rsa-b"}, claims, []byte("sig")))
	f.Add(sign(f, jwt.SigningMethodHS256, []byte(pemOf(&rsaKey().PublicKey)), claims, nil))
	f.Add(sign(f, jwt.SigningMethodHS256, []byte(hsSecret()), with(claims, "exp", 1), map[string]any{"crit": []string{"b64"}}))
	f.Add(sign(f, jwt.SigningMethodES384, ecKey384(), claims, map[string]any{"kid": "unknown"}))
	f.Add(sign(f, jwt.SigningMethodHS384, []byte(hsSecretB()+hsSecret()), claims, nil))

	secrets := secretsOf(cfg)
	f.Fuzz(func(t *testing.T, token string) {
		id, err := v.Verify(token)
		if err == nil {
			if !genuine[token] {
				t.Fatalf("a token that is not genuine verified: %q", token)
			}
			if id.Subject != "fuzz-user" || id.Anonymous {
				t.Fatalf("genuine token gave %+v", id)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Verify error is %T (%v), want *Error", err, err)
		}
		switch e.Reason {
		case ReasonMissing:
			if token != "" {
				t.Fatalf("token_missing for a non-empty token")
			}
		case ReasonInvalid:
		default:
			t.Fatalf("reason %s for a token that is not genuine", e.Reason)
		}
		if e.Detail == "" || e.Fix == "" {
			t.Fatalf("error without detail or fix: %v", err)
		}
		assertNoLeak(t, err.Error(), token, secrets)
	})
}
