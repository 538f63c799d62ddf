package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testNow is the fixed clock every test verifier reads.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return testNow }

// Keys are generated once per test binary: RSA generation is slow under -race.
var (
	rsaKey     = sync.OnceValue(func() *rsa.PrivateKey { return mustRSA(2048) })
	rsaKeyB    = sync.OnceValue(func() *rsa.PrivateKey { return mustRSA(2048) })
	ecKey256   = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P256()) })
	ecKey256B  = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P256()) })
	ecKey384   = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P384()) })
	ecKey521   = sync.OnceValue(func() *ecdsa.PrivateKey { return mustEC(elliptic.P521()) })
	hsSecret   = sync.OnceValue(func() string { return randomSecret(48) })
	hsSecretB  = sync.OnceValue(func() string { return randomSecret(32) })
	hsSecret64 = sync.OnceValue(func() string { return randomSecret(64) })
)

func mustRSA(bits int) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		panic(err)
	}
	return k
}

func mustEC(c elliptic.Curve) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// randomSecret is n printable random bytes.
func randomSecret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}

func pemOf(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func derOf(pub crypto.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return der
}

// goodClaims are claims every test verifier accepts.
func goodClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"sub":  "user-1",
		"role": "authenticated",
		"iat":  testNow.Add(-time.Minute).Unix(),
		"exp":  testNow.Add(time.Hour).Unix(),
	}
}

// with returns c with the given claims set; a nil value deletes the claim.
func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// sign signs claims with the library, adding header fields.
func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims, hdr map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	for k, v := range hdr {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

func seg(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// rawToken assembles a token from a header, claims and raw signature bytes, signed by no library.
func rawToken(hdr map[string]any, claims jwt.MapClaims, sig []byte) string {
	return seg(hdr) + "." + seg(claims) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// signECRaw signs with any EC key under any hash, and encodes r||s at size bytes each: the
// forgeries the library's own Sign refuses to make.
func signECRaw(t testing.TB, hdr map[string]any, claims jwt.MapClaims, key *ecdsa.PrivateKey, h crypto.Hash, size int) string {
	t.Helper()
	input := seg(hdr) + "." + seg(claims)
	hh := h.New()
	hh.Write([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, hh.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 2*size)
	r.FillBytes(sig[:size])
	s.FillBytes(sig[size:])
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// ecTwin returns the same ES token with s replaced by n-s: ECDSA accepts both.
func ecTwin(token string, curve elliptic.Curve) string {
	parts := strings.Split(token, ".")
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		panic(err)
	}
	size := len(sig) / 2
	s := new(big.Int).SetBytes(sig[size:])
	s.Sub(curve.Params().N, s)
	s.FillBytes(sig[size:])
	return parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// jwkOf is the JWK of a public key, with extra members.
func jwkOf(pub crypto.PublicKey, kid string, extra map[string]any) map[string]any {
	b := base64.RawURLEncoding.EncodeToString
	m := map[string]any{}
	if kid != "" {
		m["kid"] = kid
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		m["kty"] = "RSA"
		m["n"] = b(k.N.Bytes())
		m["e"] = b(big.NewInt(int64(k.E)).Bytes())
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		raw, err := k.Bytes()
		if err != nil {
			panic(err)
		}
		m["kty"] = "EC"
		m["crv"] = k.Curve.Params().Name
		m["x"] = b(raw[1 : 1+size])
		m["y"] = b(raw[1+size:])
	default:
		panic("jwkOf: unsupported key")
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// writeJWKS writes a key set into a temporary file and returns its path.
func writeJWKS(t testing.TB, keys ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "jwks.json", b)
}

func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustNew(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = fixedNow
	}
	v, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// allKeysConfig configures every key kind the tests sign with.
func allKeysConfig(t testing.TB) Config {
	return Config{
		Secrets:    []string{hsSecret(), hsSecretB(), hsSecret64()},
		PublicKeys: []string{pemOf(&rsaKey().PublicKey), pemOf(&ecKey256().PublicKey)},
		JWKSFile: writeJWKS(t,
			jwkOf(&rsaKeyB().PublicKey, "rsa-b", map[string]any{"use": "sig"}),
			jwkOf(&ecKey384().PublicKey, "ec-384", nil),
			jwkOf(&ecKey521().PublicKey, "ec-521", map[string]any{"alg": "ES512"}),
		),
		Now: fixedNow,
	}
}

// secretsOf lists what no error text may ever contain.
func secretsOf(cfg Config) []string {
	out := append([]string(nil), cfg.Secrets...)
	for _, k := range []crypto.PublicKey{&rsaKey().PublicKey, &rsaKeyB().PublicKey, &ecKey256().PublicKey} {
		// A public key is no secret, but no error needs to quote it either: a message that
		// carries key material is a message that would carry a secret given the chance.
		out = append(out, base64.StdEncoding.EncodeToString(derOf(k))[40:80])
	}
	return out
}

// wantFail asserts that Verify refuses token with reason and stage, that the error is an *Error
// matching its sentinel, that Detail contains detail, and that the error text leaks neither the
// token nor a secret.
func wantFail(t *testing.T, v *Verifier, cfg Config, token string, reason Reason, stage Stage, detail string) *Error {
	t.Helper()
	id, err := v.Verify(token)
	if err == nil {
		t.Fatalf("Verify succeeded with %+v, want %s", id, reason)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Verify error is %T (%v), want *Error", err, err)
	}
	if e.Reason != reason || e.Stage != stage {
		t.Fatalf("Verify: reason %s, stage %s, want %s, %s (%v)", e.Reason, e.Stage, reason, stage, err)
	}
	if !errors.Is(err, &Error{Reason: reason}) {
		t.Errorf("errors.Is(err, sentinel of %s) = false", reason)
	}
	if !strings.Contains(e.Detail, detail) {
		t.Errorf("Detail = %q, want it to contain %q", e.Detail, detail)
	}
	if e.Fix == "" {
		t.Errorf("Fix is empty for %v", err)
	}
	assertNoLeak(t, err.Error(), token, secretsOf(cfg))
	return e
}

func assertNoLeak(t testing.TB, msg, token string, secrets []string) {
	t.Helper()
	if len(token) >= 16 && strings.Contains(msg, token) {
		t.Errorf("error text contains the token: %s", msg)
	}
	// The signature segment alone is as good as the token to anyone replaying it.
	if parts := strings.Split(token, "."); len(parts) == 3 && len(parts[2]) >= 16 && strings.Contains(msg, parts[2]) {
		t.Errorf("error text contains the token's signature: %s", msg)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("error text contains a secret or key material: %s", msg)
		}
	}
}
