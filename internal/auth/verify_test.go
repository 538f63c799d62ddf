package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
)

func TestVerifyAccepts(t *testing.T) {
	cfg := allKeysConfig(t)
	v := mustNew(t, cfg)
	tests := []struct {
		name   string
		method jwt.SigningMethod
		key    func() any
		hdr    map[string]any
	}{
		{"HS256", jwt.SigningMethodHS256, func() any { return []byte(hsSecret()) }, nil},
		{"HS256 rotated secret", jwt.SigningMethodHS256, func() any { return []byte(hsSecretB()) }, nil},
		{"HS384", jwt.SigningMethodHS384, func() any { return []byte(hsSecret()) }, nil},
		{"HS512", jwt.SigningMethodHS512, func() any { return []byte(hsSecret64()) }, nil},
		{"HS256 kid ignored", jwt.SigningMethodHS256, func() any { return []byte(hsSecret()) }, map[string]any{"kid": "whatever"}},
		{"RS256 PEM", jwt.SigningMethodRS256, func() any { return rsaKey() }, nil},
		{"RS512 PEM", jwt.SigningMethodRS512, func() any { return rsaKey() }, nil},
		{"PS256 PEM", jwt.SigningMethodPS256, func() any { return rsaKey() }, nil},
		{"RS256 PEM with a kid the JWKS lacks", jwt.SigningMethodRS256, func() any { return rsaKey() }, map[string]any{"kid": "issuer-key-7"}},
		{"RS256 JWKS by kid", jwt.SigningMethodRS256, func() any { return rsaKeyB() }, map[string]any{"kid": "rsa-b"}},
		{"RS256 JWKS without kid", jwt.SigningMethodRS256, func() any { return rsaKeyB() }, nil},
		{"ES256 PEM", jwt.SigningMethodES256, func() any { return ecKey256() }, nil},
		{"ES384 JWKS by kid", jwt.SigningMethodES384, func() any { return ecKey384() }, map[string]any{"kid": "ec-384"}},
		{"ES512 JWKS by kid", jwt.SigningMethodES512, func() any { return ecKey521() }, map[string]any{"kid": "ec-521"}},
		{"typ and extra headers", jwt.SigningMethodHS256, func() any { return []byte(hsSecret()) }, map[string]any{"typ": "at+jwt", "x-custom": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claims := goodClaims()
			token := sign(t, tt.method, tt.key(), claims, tt.hdr)
			id, err := v.Verify(token)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := Identity{
				Subject:   "user-1",
				Claims:    map[string]any{"sub": "user-1", "role": "authenticated", "iat": float64(claims["iat"].(int64)), "exp": float64(claims["exp"].(int64))},
				ExpiresAt: time.Unix(claims["exp"].(int64), 0).Add(DefaultLeeway),
			}
			if diff := cmp.Diff(want, id); diff != "" {
				t.Errorf("Identity (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVerifyRefusesAlgNone: an unsigned token proves nothing, whatever the spelling of none and
// whatever bytes sit in its signature segment.
func TestVerifyRefusesAlgNone(t *testing.T) {
	cfg := allKeysConfig(t)
	v := mustNew(t, cfg)
	for _, alg := range []string{"none", "None", "NONE", "nOnE"} {
		hdr := map[string]any{"alg": alg, "typ": "JWT"}
		input := seg(hdr) + "." + seg(goodClaims())
		mac := hmac.New(sha256.New, []byte(hsSecret()))
		mac.Write([]byte(input))
		for name, sig := range map[string][]byte{
			"unsigned":          nil,
			"signed with HMAC":  mac.Sum(nil),
			"signed with junk":  []byte("not a signature at all"),
			"signed, with kid":  mac.Sum(nil),
			"unsigned, library": nil,
		} {
			t.Run(alg+"/"+name, func(t *testing.T) {
				h := hdr
				if strings.Contains(name, "kid") {
					h = map[string]any{"alg": alg, "kid": "rsa-b"}
				}
				token := rawToken(h, goodClaims(), sig)
				if name == "unsigned, library" {
					// The library's own none method, allowed to sign, must not be allowed to verify.
					tok := jwt.NewWithClaims(jwt.SigningMethodNone, goodClaims())
					tok.Header["alg"] = alg
					s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
					if err != nil {
						t.Fatal(err)
					}
					token = s
				}
				wantFail(t, v, cfg, token, ReasonInvalid, StageAlg, "is refused")
			})
		}
	}
}

// TestVerifyRefusesAlgConfusion: a token's alg picks one key family, and it is only ever checked
// against keys of that family (and, for EC, that curve).
func TestVerifyRefusesAlgConfusion(t *testing.T) {
	rsaPub, ecPub := &rsaKey().PublicKey, &ecKey256().PublicKey
	pkcs1 := x509.MarshalPKCS1PublicKey(rsaPub)
	hs := func(secret []byte, hdr map[string]any) func(t *testing.T) string {
		return func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, secret, goodClaims(), hdr) }
	}
	rsaOnly := Config{PublicKeys: []string{pemOf(rsaPub)}}
	ecOnly := Config{PublicKeys: []string{pemOf(ecPub)}}
	withSecrets := func(c Config) Config { c.Secrets = []string{hsSecret()}; return c }
	jwksRSA := func(t *testing.T) Config {
		return Config{Secrets: []string{hsSecret()}, JWKSFile: writeJWKS(t, jwkOf(rsaPub, "k1", nil))}
	}
	static := func(c Config) func(*testing.T) Config { return func(*testing.T) Config { return c } }

	tests := []struct {
		name   string
		cfg    func(*testing.T) Config
		token  func(*testing.T) string
		stage  Stage
		detail string
	}{
		{"HS256 keyed with the RSA PEM, RSA only", static(rsaOnly), hs([]byte(pemOf(rsaPub)), nil), StageAlg, "not accepted"},
		{"HS256 keyed with the RSA PEM, RSA and secrets", static(withSecrets(rsaOnly)), hs([]byte(pemOf(rsaPub)), nil), StageSignature, "does not verify"},
		{"HS256 keyed with the RSA PKIX DER", static(withSecrets(rsaOnly)), hs(derOf(rsaPub), nil), StageSignature, "does not verify"},
		{"HS256 keyed with the RSA PKCS1 DER", static(withSecrets(rsaOnly)), hs(pkcs1, nil), StageSignature, "does not verify"},
		{"HS256 keyed with the EC PEM", static(withSecrets(ecOnly)), hs([]byte(pemOf(ecPub)), nil), StageSignature, "does not verify"},
		{"HS256 keyed with the EC DER", static(withSecrets(ecOnly)), hs(derOf(ecPub), nil), StageSignature, "does not verify"},
		{"HS256 keyed with the EC PEM, EC only", static(ecOnly), hs([]byte(pemOf(ecPub)), nil), StageAlg, "not accepted"},
		{"HS256 keyed with the RSA PEM, kid of the JWKS RSA key", jwksRSA, hs([]byte(pemOf(rsaPub)), map[string]any{"kid": "k1"}), StageSignature, "does not verify"},
		{
			"RS256 against an EC-only server", static(ecOnly),
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, rsaKey(), goodClaims(), nil) },
			StageAlg, "not accepted",
		},
		{
			"ES256 against an RSA-only server", static(rsaOnly),
			func(t *testing.T) string { return sign(t, jwt.SigningMethodES256, ecKey256(), goodClaims(), nil) },
			StageAlg, "not accepted",
		},
		{
			// ecdsa.Verify truncates the digest to the curve order, so a P-256 key signing a
			// SHA-384 digest, padded to ES384's 48-byte halves, verifies unless the curve is
			// checked. Only the P-384 key may be offered to ES384.
			"ES384 made with the P-256 key", static(Config{PublicKeys: []string{pemOf(ecPub), pemOf(&ecKey384().PublicKey)}}),
			func(t *testing.T) string {
				return signECRaw(t, map[string]any{"alg": "ES384"}, goodClaims(), ecKey256(), crypto.SHA384, 48)
			},
			StageSignature, "does not verify with the 1 EC key",
		},
		{
			"ES256 made with the P-384 key", static(Config{PublicKeys: []string{pemOf(ecPub), pemOf(&ecKey384().PublicKey)}}),
			func(t *testing.T) string {
				return signECRaw(t, map[string]any{"alg": "ES256"}, goodClaims(), ecKey384(), crypto.SHA256, 48)
			},
			StageSignature, "does not verify with the 1 EC key",
		},
		{
			"ES256 when only a P-384 key exists", static(Config{PublicKeys: []string{pemOf(&ecKey384().PublicKey)}}),
			func(t *testing.T) string { return sign(t, jwt.SigningMethodES256, ecKey256(), goodClaims(), nil) },
			StageAlg, "not accepted",
		},
		{
			// The header's own key is the attacker's: never trusted.
			"RS256 carrying its own jwk", static(rsaOnly),
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodRS256, rsaKeyB(), goodClaims(), map[string]any{
					"jwk": jwkOf(&rsaKeyB().PublicKey, "", nil), "jku": "https://attacker.invalid/jwks.json",
					"x5u": "https://attacker.invalid/cert.pem",
				})
			},
			StageSignature, "does not verify",
		},
		{
			"RS256 by another RSA key", static(rsaOnly),
			func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, rsaKeyB(), goodClaims(), nil) },
			StageSignature, "does not verify",
		},
		{
			"HS256 by a secret not configured", static(withSecrets(rsaOnly)),
			hs([]byte(randomSecret(40)), nil), StageSignature, "HMAC secret",
		},
		{
			"HS512 when every secret is too short for it", static(withSecrets(rsaOnly)),
			func(t *testing.T) string {
				return sign(t, jwt.SigningMethodHS512, []byte(hsSecret()), goodClaims(), nil)
			},
			StageAlg, "not accepted",
		},
		{
			"alg in another case", static(withSecrets(rsaOnly)),
			func(t *testing.T) string {
				tok := sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), goodClaims(), nil)
				_, rest, _ := strings.Cut(tok, ".")
				return seg(map[string]any{"alg": "hs256", "typ": "JWT"}) + "." + rest
			},
			StageAlg, "not accepted",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg(t)
			v := mustNew(t, cfg)
			wantFail(t, v, cfg, tt.token(t), ReasonInvalid, tt.stage, tt.detail)
		})
	}
}

// TestCandidatesStayInFamily checks the key choice itself: every key offered to an alg is of the
// alg's family and curve, and secrets are offered to HS algs only.
func TestCandidatesStayInFamily(t *testing.T) {
	v := mustNew(t, allKeysConfig(t))
	ks := v.keys.Load()
	for _, alg := range algOrder {
		for _, kid := range []string{"", "rsa-b", "ec-384", "ec-521", "nope"} {
			keys, _ := ks.candidates(alg, kid)
			spec := algs[alg]
			for _, k := range keys {
				ok := false
				switch pub := any(k).(type) {
				case []byte:
					ok = spec.family == familyHMAC && len(pub) >= spec.minSecret
				case *rsa.PublicKey:
					ok = spec.family == familyRSA
				case *ecdsa.PublicKey:
					ok = spec.family == familyEC && pub.Curve == spec.curve
				}
				if !ok {
					t.Errorf("candidates(%s, %q) offers a %T", alg, kid, k)
				}
			}
		}
	}
	if got, want := ks.accepted, algOrder; !cmp.Equal(got, want) {
		t.Errorf("accepted = %v, want %v", got, want)
	}
}

func TestVerifyExpiry(t *testing.T) {
	base := Config{Secrets: []string{hsSecret()}, Now: fixedNow}
	tests := []struct {
		name   string
		cfg    func(Config) Config
		claims jwt.MapClaims
		reason Reason // "" means the token verifies
		detail string
	}{
		{"expired", nil, with(goodClaims(), "exp", testNow.Add(-time.Minute).Unix()), ReasonExpired, "expired at 2026-03-01T11:59:00Z, 1m0s ago"},
		{"expired long ago", nil, with(goodClaims(), "iat", 1, "exp", 2), ReasonExpired, "expired at 1970"},
		{"expired within the default leeway", nil, with(goodClaims(), "exp", testNow.Add(-20*time.Second).Unix()), "", ""},
		{"expired past a 10s leeway", func(c Config) Config { c.Leeway = 10 * time.Second; return c }, with(goodClaims(), "exp", testNow.Add(-20*time.Second).Unix()), ReasonExpired, "leeway 10s"},
		{"expired a second ago, no leeway", func(c Config) Config { c.Leeway = -1; return c }, with(goodClaims(), "exp", testNow.Add(-time.Second).Unix()), ReasonExpired, "leeway 0s"},
		{"exp missing", nil, with(goodClaims(), "exp", nil), ReasonInvalid, "no exp claim"},
		{"exp zero", nil, with(goodClaims(), "exp", 0), ReasonInvalid, "no exp claim"},
		{"exp missing, allowed", func(c Config) Config { c.AllowNoExpiry = true; return c }, with(goodClaims(), "exp", nil), "", ""},
		{"expired, allow no expiry still checks it", func(c Config) Config { c.AllowNoExpiry = true; return c }, with(goodClaims(), "exp", testNow.Add(-time.Hour).Unix()), ReasonExpired, "expired"},
		// A client told "expired" refreshes and retries; one whose token is wrong anyway must be
		// told that instead, or it retries forever.
		{"expired and wrong issuer", func(c Config) Config { c.Issuer = "https://auth.example"; return c }, with(goodClaims(), "iss", "https://other.example", "exp", testNow.Add(-time.Hour).Unix()), ReasonInvalid, "iss claim"},
		{"expired and not yet valid", nil, with(goodClaims(), "nbf", testNow.Add(time.Hour).Unix(), "exp", testNow.Add(-time.Hour).Unix()), ReasonInvalid, "valid at no time"},
		{"expired and issued in the future", nil, with(goodClaims(), "iat", testNow.Add(time.Hour).Unix(), "exp", testNow.Add(-time.Hour).Unix()), ReasonInvalid, "valid at no time"},
		// A token whose nbf or iat is ahead is cured by time or a fresh token, like an expired
		// one: the client must be told token_expired, not sent away for good.
		{"nbf in the future", nil, with(goodClaims(), "nbf", testNow.Add(time.Hour).Unix()), ReasonNotYetValid, "not valid before 2026-03-01T13:00:00Z (nbf), 1h0m0s from now"},
		{"iat in the future", nil, with(goodClaims(), "iat", testNow.Add(time.Hour).Unix()), ReasonNotYetValid, "issued at 2026-03-01T13:00:00Z (iat)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.cfg != nil {
				cfg = tt.cfg(cfg)
			}
			v := mustNew(t, cfg)
			token := sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), tt.claims, nil)
			if tt.reason == "" {
				id, err := v.Verify(token)
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				// In force as long as it verifies: until exp plus the leeway.
				if exp, ok := tt.claims["exp"].(int64); ok && !id.ExpiresAt.Equal(time.Unix(exp, 0).Add(cfg.leeway())) {
					t.Errorf("ExpiresAt = %v, want exp %v plus the leeway %s", id.ExpiresAt, time.Unix(exp, 0), cfg.leeway())
				}
				if _, ok := tt.claims["exp"]; !ok && !id.ExpiresAt.IsZero() {
					t.Errorf("ExpiresAt = %v, want zero for a token without exp", id.ExpiresAt)
				}
				return
			}
			e := wantFail(t, v, cfg, token, tt.reason, StageClaims, tt.detail)
			if tt.reason == ReasonNotYetValid && (!errors.Is(e, ErrNotYetValid) || errors.Is(e, ErrInvalid) || errors.Is(e, ErrExpired)) {
				t.Errorf("not-yet-valid error matches ErrNotYetValid=%v ErrInvalid=%v ErrExpired=%v, want true, false, false",
					errors.Is(e, ErrNotYetValid), errors.Is(e, ErrInvalid), errors.Is(e, ErrExpired))
			}
			if tt.reason == ReasonExpired {
				if !errors.Is(e, ErrExpired) || errors.Is(e, ErrInvalid) {
					t.Errorf("expired error matches ErrExpired=%v ErrInvalid=%v, want true, false", errors.Is(e, ErrExpired), errors.Is(e, ErrInvalid))
				}
				if !errors.Is(e, jwt.ErrTokenExpired) {
					t.Errorf("expired error does not unwrap to jwt.ErrTokenExpired")
				}
			}
		})
	}
}

// TestVerifyForgedExpiredIsInvalid: the signature is checked before any claim, so a forged token
// never learns whether its claims would have passed.
func TestVerifyForgedExpiredIsInvalid(t *testing.T) {
	cfg := Config{Secrets: []string{hsSecret()}, Now: fixedNow}
	v := mustNew(t, cfg)
	token := sign(t, jwt.SigningMethodHS256, []byte(randomSecret(48)), with(goodClaims(), "exp", 2), nil)
	wantFail(t, v, cfg, token, ReasonInvalid, StageSignature, "does not verify")
}

func TestVerifyClaims(t *testing.T) {
	base := Config{Secrets: []string{hsSecret()}, Now: fixedNow}
	iss := func(c Config) Config { c.Issuer = "https://auth.example"; return c }
	aud := func(c Config) Config { c.Audience = "herald"; return c }
	tests := []struct {
		name   string
		cfg    func(Config) Config
		claims jwt.MapClaims
		detail string // "" means the token verifies
	}{
		{"nbf within the leeway", nil, with(goodClaims(), "nbf", testNow.Add(20*time.Second).Unix()), ""},
		{"nbf past", nil, with(goodClaims(), "nbf", testNow.Add(-time.Hour).Unix()), ""},
		{"iat within the leeway", nil, with(goodClaims(), "iat", testNow.Add(10*time.Second).Unix()), ""},
		{"issuer matches", iss, with(goodClaims(), "iss", "https://auth.example"), ""},
		{"issuer wrong", iss, with(goodClaims(), "iss", "https://evil.example"), `iss claim is not "https://auth.example"`},
		{"issuer missing", iss, goodClaims(), `no iss claim; auth.issuer requires "https://auth.example"`},
		{"issuer not checked when unset", nil, with(goodClaims(), "iss", "anything"), ""},
		{"audience matches", aud, with(goodClaims(), "aud", "herald"), ""},
		{"audience among several", aud, with(goodClaims(), "aud", []string{"api", "herald"}), ""},
		{"audience wrong", aud, with(goodClaims(), "aud", []string{"api"}), `aud claim does not include "herald"`},
		{"audience missing", aud, goodClaims(), `no aud claim; auth.audience requires "herald"`},
		{"exp a string", nil, with(goodClaims(), "exp", "tomorrow"), "exp claim is not a number"},
		{"nbf a string", nil, with(goodClaims(), "nbf", "now"), "nbf claim is not a number"},
		{"iss a number", iss, with(goodClaims(), "iss", 7), "iss claim is not a string"},
		{"aud an object", aud, with(goodClaims(), "aud", map[string]any{"a": 1}), "aud claim is not a string or an array"},
		{"sub a number", nil, with(goodClaims(), "sub", 42), "sub claim is not a string"},
		{"sub missing", nil, with(goodClaims(), "sub", nil), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.cfg != nil {
				cfg = tt.cfg(cfg)
			}
			v := mustNew(t, cfg)
			token := sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), tt.claims, nil)
			if tt.detail == "" {
				if _, err := v.Verify(token); err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			wantFail(t, v, cfg, token, ReasonInvalid, StageClaims, tt.detail)
		})
	}
}

func TestVerifyMalformed(t *testing.T) {
	cfg := allKeysConfig(t)
	v := mustNew(t, cfg)
	good := sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), goodClaims(), nil)
	parts := strings.Split(good, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	// The last character of a 32-byte signature carries 4 bits and 2 unused ones: flipping an
	// unused bit decodes to the same bytes unless decoding is strict.
	last := parts[2][len(parts[2])-1]
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	sloppy := parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-1] + string(alphabet[strings.IndexByte(alphabet, last)^1])

	tests := []struct {
		name   string
		token  string
		stage  Stage
		detail string
	}{
		{"one segment", "abc", StageDecode, "three base64url segments"},
		{"two segments", parts[0] + "." + parts[1], StageDecode, "three base64url segments"},
		{"four segments", good + ".x", StageDecode, "three base64url segments"},
		{"bearer prefix", "Bearer " + good, StageDecode, `starts with "Bearer "`},
		{"header not base64", "!!!." + parts[1] + "." + parts[2], StageDecode, "header segment is not base64url"},
		{"header padded", b64([]byte(`{"alg":"HS256"}`)) + "=." + parts[1] + "." + parts[2], StageDecode, "header segment is not base64url"},
		{"header not JSON", b64([]byte("alg=HS256")) + "." + parts[1] + "." + parts[2], StageDecode, "header is not a JSON object"},
		{"header an array", b64([]byte(`["HS256"]`)) + "." + parts[1] + "." + parts[2], StageDecode, "header is not a JSON object"},
		{"header null", b64([]byte(`null`)) + "." + parts[1] + "." + parts[2], StageDecode, "header is not a JSON object"},
		{"alg missing", seg(map[string]any{"typ": "JWT"}) + "." + parts[1] + "." + parts[2], StageDecode, "no alg"},
		{"alg a number", seg(map[string]any{"alg": 256}) + "." + parts[1] + "." + parts[2], StageDecode, "no alg"},
		{"alg unknown", seg(map[string]any{"alg": "HS1024"}) + "." + parts[1] + "." + parts[2], StageAlg, `alg "HS1024" is not accepted`},
		{"alg EdDSA", seg(map[string]any{"alg": "EdDSA"}) + "." + parts[1] + "." + parts[2], StageAlg, "is not accepted"},
		{"kid a number", seg(map[string]any{"alg": "HS256", "kid": 1}) + "." + parts[1] + "." + parts[2], StageDecode, "kid is not a string"},
		{"crit", sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), goodClaims(), map[string]any{"crit": []string{"b64"}, "b64": false}), StageDecode, "crit"},
		{"payload not base64", parts[0] + ".%%%." + parts[2], StageDecode, "payload segment is not base64url"},
		{"payload not JSON", parts[0] + "." + b64([]byte("sub=1")) + "." + parts[2], StageDecode, "payload is not a JSON object"},
		{"payload an array", parts[0] + "." + b64([]byte(`[1]`)) + "." + parts[2], StageDecode, "payload is not a JSON object"},
		{"signature not base64", parts[0] + "." + parts[1] + ".***", StageDecode, "signature segment is not base64url"},
		{"signature padded", good + "=", StageDecode, "signature segment is not base64url"},
		{"signature with non-canonical trailing bits", sloppy, StageDecode, "signature segment is not base64url"},
		{"signature empty", parts[0] + "." + parts[1] + ".", StageSignature, "does not verify"},
		{"signature truncated", parts[0] + "." + parts[1] + "." + parts[2][:20], StageSignature, "does not verify"},
		{"payload changed", parts[0] + "." + seg(with(goodClaims(), "role", "admin")) + "." + parts[2], StageSignature, "does not verify"},
		{"too large", parts[0] + "." + seg(with(goodClaims(), "pad", strings.Repeat("x", MaxTokenBytes))) + "." + parts[2], StageDecode, "at most 16384 are read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantFail(t, v, cfg, tt.token, ReasonInvalid, tt.stage, tt.detail)
		})
	}
	if sloppy == good {
		t.Fatal("the non-canonical signature equals the original")
	}
}

func TestVerifyMissing(t *testing.T) {
	cfg := Config{Secrets: []string{hsSecret()}, AllowAnonymous: true}
	v := mustNew(t, cfg)
	e := wantFail(t, v, cfg, "", ReasonMissing, StageDecode, "no token")
	if !errors.Is(e, ErrMissing) {
		t.Errorf("errors.Is(err, ErrMissing) = false")
	}
}

func TestAnonymous(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"allowed, no keys", Config{AllowAnonymous: true}, false},
		{"allowed, with keys", Config{AllowAnonymous: true, Secrets: []string{hsSecret()}}, false},
		{"not allowed", Config{Secrets: []string{hsSecret()}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mustNew(t, tt.cfg)
			id, err := v.Anonymous()
			if tt.wantErr {
				var e *Error
				if !errors.As(err, &e) || e.Reason != ReasonAnonymousNotAllowed || !errors.Is(err, ErrAnonymousNotAllowed) {
					t.Fatalf("Anonymous() error = %v, want %s", err, ReasonAnonymousNotAllowed)
				}
				if !strings.Contains(e.Fix, "auth.allow_anonymous") {
					t.Errorf("Fix = %q, want it to name auth.allow_anonymous", e.Fix)
				}
				return
			}
			if err != nil {
				t.Fatalf("Anonymous(): %v", err)
			}
			if diff := cmp.Diff(Identity{Claims: map[string]any{}, Anonymous: true}, id); diff != "" {
				t.Errorf("Anonymous() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAnonymousServerStillVerifies: allowing anonymous connections does not make a bad token
// acceptable, and a server with no keys says so.
func TestAnonymousServerStillVerifies(t *testing.T) {
	cfg := Config{AllowAnonymous: true}
	v := mustNew(t, cfg)
	token := sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), goodClaims(), nil)
	wantFail(t, v, cfg, token, ReasonInvalid, StageAlg, "no alg at all")
}

func TestErrorIs(t *testing.T) {
	e := &Error{Stage: StageClaims, Reason: ReasonExpired, Detail: "d", Fix: "f", Err: jwt.ErrTokenExpired}
	tests := []struct {
		name   string
		target error
		want   bool
	}{
		{"own sentinel", ErrExpired, true},
		{"other sentinel", ErrInvalid, false},
		{"wrapped library error", jwt.ErrTokenExpired, true},
		{"unrelated library error", jwt.ErrTokenMalformed, false},
		{"a non-sentinel Error of the same reason", &Error{Reason: ReasonExpired, Detail: "x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(e, tt.target); got != tt.want {
				t.Errorf("errors.Is = %v, want %v", got, tt.want)
			}
		})
	}
	if got, want := e.Error(), "auth claims: token_expired: d (fix: f)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestVerifyConcurrentWithReload runs verifications while the keys are reloaded (under -race).
func TestVerifyConcurrentWithReload(t *testing.T) {
	cfg := allKeysConfig(t)
	v := mustNew(t, cfg)
	tokens := []string{
		sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), goodClaims(), nil),
		sign(t, jwt.SigningMethodES256, ecKey256(), goodClaims(), nil),
		sign(t, jwt.SigningMethodRS256, rsaKeyB(), goodClaims(), map[string]any{"kid": "rsa-b"}),
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := v.Verify(tokens[(g+i)%len(tokens)]); err != nil {
					t.Errorf("Verify: %v", err)
					return
				}
			}
		})
	}
	for range 10 {
		if err := v.Reload(); err != nil {
			t.Errorf("Reload: %v", err)
		}
	}
	wg.Wait()
}

// TestParsersLimitedToFamily: behind the family chosen from the header, each family's parser
// refuses any alg outside its family even when handed a key that would verify it.
func TestParsersLimitedToFamily(t *testing.T) {
	v := mustNew(t, allKeysConfig(t))
	ks := v.keys.Load()
	tokens := map[family]struct {
		token string
		key   any
	}{
		familyHMAC: {sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), goodClaims(), nil), []byte(hsSecret())},
		familyRSA:  {sign(t, jwt.SigningMethodRS256, rsaKey(), goodClaims(), nil), &rsaKey().PublicKey},
		familyEC:   {sign(t, jwt.SigningMethodES256, ecKey256(), goodClaims(), nil), &ecKey256().PublicKey},
	}
	for pf, parser := range ks.parsers {
		for tf, tok := range tokens {
			t.Run(pf.String()+" parser/"+tf.String()+" token", func(t *testing.T) {
				_, err := parser.ParseWithClaims(tok.token, jwt.MapClaims{}, func(*jwt.Token) (any, error) { return tok.key, nil })
				if pf == tf && err != nil {
					t.Fatalf("own family: %v", err)
				}
				if pf != tf && !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
					t.Fatalf("another family's token: err = %v, want the alg refused", err)
				}
			})
		}
	}
	if len(ks.parsers) != 3 {
		t.Errorf("%d parsers, want one per family", len(ks.parsers))
	}
}

// TestVerifyApp: the identity's app is the string claim auth.app_claim names ("app" unless
// set); a missing claim, or one that is not a string, is no app.
func TestVerifyApp(t *testing.T) {
	tests := []struct {
		name     string
		appClaim string
		claims   map[string]any
		want     string
	}{
		{name: "default claim", claims: map[string]any{"app": "mobile"}, want: "mobile"},
		{name: "no claim", claims: map[string]any{}, want: ""},
		{name: "not a string", claims: map[string]any{"app": 7}, want: ""},
		{name: "configured claim", appClaim: "azp", claims: map[string]any{"azp": "web", "app": "mobile"}, want: "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := allKeysConfig(t)
			cfg.AppClaim = tt.appClaim
			v := mustNew(t, cfg)
			claims := goodClaims()
			for k, val := range tt.claims {
				claims[k] = val
			}
			id, err := v.Verify(sign(t, jwt.SigningMethodHS256, []byte(hsSecret()), claims, nil))
			if err != nil {
				t.Fatal(err)
			}
			if id.App != tt.want {
				t.Errorf("App = %q, want %q", id.App, tt.want)
			}
		})
	}
}
