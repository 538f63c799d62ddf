package auth

import (
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	short := randomSecret(31)
	tests := []struct {
		name    string
		cfg     Config
		wantKey string   // "" means valid
		wantIn  []string // substrings of the error text
	}{
		{
			"nothing configured", Config{}, "auth",
			[]string{"auth.secrets", "auth.public_keys", "auth.jwks_file", "auth.allow_anonymous", "HERALD_AUTH_SECRETS"},
		},
		{"anonymous only", Config{AllowAnonymous: true}, "", nil},
		{"one secret", Config{Secrets: []string{hsSecret()}}, "", nil},
		{"a secret of exactly 32 bytes", Config{Secrets: []string{hsSecretB()}}, "", nil},
		{"a short secret", Config{Secrets: []string{hsSecret(), short}}, "auth.secrets[1]", []string{"31 bytes", "at least 32", "openssl rand"}},
		{"a PEM as secret", Config{Secrets: []string{pemOf(&rsaKey().PublicKey)}}, "auth.secrets[0]", []string{"PEM", "auth.public_keys"}},
		{"a secret with a trailing newline", Config{Secrets: []string{hsSecret() + "\n"}}, "auth.secrets[0]", []string{"whitespace"}},
		{"an empty public key entry", Config{PublicKeys: []string{" "}}, "auth.public_keys[0]", []string{"empty"}},
		{"a JWKS file only", Config{JWKSFile: "/etc/herald/jwks.json"}, "", nil},
		{"leeway at the bound", Config{AllowAnonymous: true, Leeway: MaxLeeway}, "", nil},
		{"leeway too large", Config{AllowAnonymous: true, Leeway: time.Hour}, "auth.leeway", []string{"1h0m0s", "30s or less"}},
		{"leeway negative", Config{AllowAnonymous: true, Leeway: -1}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate() = %v, want a *ConfigError", err)
			}
			if ce.Stage != "config" || ce.Key != tt.wantKey || ce.Detail == "" || ce.Fix == "" {
				t.Errorf("got stage %q key %q detail %q fix %q, want stage config, key %q, a detail and a fix",
					ce.Stage, ce.Key, ce.Detail, ce.Fix, tt.wantKey)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			assertNoLeak(t, err.Error(), "", append(tt.cfg.Secrets, short, hsSecret()))
			if _, nerr := New(tt.cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New() = %v, want the Validate error", nerr)
			}
		})
	}
}

func TestLeewayDefault(t *testing.T) {
	tests := []struct {
		in, want time.Duration
	}{{0, DefaultLeeway}, {-1, 0}, {-time.Hour, 0}, {5 * time.Second, 5 * time.Second}}
	for _, tt := range tests {
		t.Run(tt.in.String(), func(t *testing.T) {
			if got := (Config{Leeway: tt.in}).leeway(); got != tt.want {
				t.Errorf("leeway() = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestNewLoadErrors: key material that cannot be used fails New, naming the config key, and
// never quoting a secret.
func TestNewLoadErrors(t *testing.T) {
	ec224 := mustEC(elliptic.P224())
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024 := mustRSA(1024)
	ecPriv, err := x509.MarshalECPrivateKey(ecKey256())
	if err != nil {
		t.Fatal(err)
	}
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecPriv}))
	dir := t.TempDir()
	tooMany := make([]map[string]any, maxKeys+1)
	for i := range tooMany {
		tooMany[i] = jwkOf(&ecKey256().PublicKey, fmt.Sprint("k", i), nil)
	}
	ecJWK := jwkOf(&ecKey256().PublicKey, "ec", nil)
	// A key whose DER passes Validate's whitespace check, so New gets to compare it.
	derKey := &ecKey256().PublicKey
	for d := string(derOf(derKey)); strings.TrimSpace(d) != d; d = string(derOf(derKey)) {
		derKey = &mustEC(elliptic.P256()).PublicKey
	}

	tests := []struct {
		name    string
		cfg     func(t *testing.T) Config
		wantKey string
		wantIn  string
	}{
		{"missing PEM file", func(*testing.T) Config {
			return Config{PublicKeys: []string{filepath.Join(dir, "absent.pem")}}
		}, "auth.public_keys[0]", "cannot read the PEM file"},
		{"text with no PEM block", func(t *testing.T) Config {
			return Config{PublicKeys: []string{writeFile(t, "k.pem", []byte("hello"))}}
		}, "auth.public_keys[0]", "holds no PEM block"},
		{"a private key", func(*testing.T) Config {
			return Config{PublicKeys: []string{pemOf(&rsaKey().PublicKey), privPEM}}
		}, "auth.public_keys[1]", "is a private key"},
		{"a 1024-bit RSA key", func(*testing.T) Config {
			return Config{PublicKeys: []string{pemOf(&rsa1024.PublicKey)}}
		}, "auth.public_keys[0]", "1024-bit RSA key is too small"},
		{"a P-224 key", func(*testing.T) Config {
			return Config{PublicKeys: []string{pemOf(&ec224.PublicKey)}}
		}, "auth.public_keys[0]", "P-224 is not supported"},
		{"an Ed25519 key", func(*testing.T) Config {
			return Config{PublicKeys: []string{pemOf(edPub)}}
		}, "auth.public_keys[0]", "Ed25519"},
		{"a corrupt PEM block", func(*testing.T) Config {
			return Config{PublicKeys: []string{"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}}
		}, "auth.public_keys[0]", "does not parse"},
		{"a secret that is a public key's DER", func(*testing.T) Config {
			return Config{Secrets: []string{string(derOf(derKey))}, PublicKeys: []string{pemOf(derKey)}}
		}, "auth.secrets[0]", "DER encoding of a configured public key"},
		{"missing JWKS file", func(*testing.T) Config {
			return Config{JWKSFile: filepath.Join(dir, "absent.json")}
		}, "auth.jwks_file", "cannot open"},
		{"JWKS not JSON", func(t *testing.T) Config {
			return Config{JWKSFile: writeFile(t, "jwks.json", []byte("<html>"))}
		}, "auth.jwks_file", "is not a JSON Web Key Set"},
		{"JWKS too large", func(t *testing.T) Config {
			return Config{JWKSFile: writeFile(t, "jwks.json", make([]byte, maxJWKSBytes+1))}
		}, "auth.jwks_file", "too large"},
		{"JWKS with only ignored keys", func(t *testing.T) Config {
			return Config{JWKSFile: writeJWKS(t,
				map[string]any{"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
				jwkOf(&rsaKey().PublicKey, "enc", map[string]any{"use": "enc"}),
			)}
		}, "auth.jwks_file", "all 2 keys were ignored"},
		{"JWKS with a private key", func(t *testing.T) Config {
			return Config{JWKSFile: writeJWKS(t, jwkOf(&ecKey256().PublicKey, "p", map[string]any{"d": "c2VjcmV0"}))}
		}, "auth.jwks_file", "private key material"},
		{"JWKS EC point off the curve", func(t *testing.T) Config {
			bad := jwkOf(&ecKey256().PublicKey, "bad", nil)
			bad["y"] = ecJWK["x"]
			return Config{JWKSFile: writeJWKS(t, bad)}
		}, "auth.jwks_file", "not a point on P-256"},
		{"JWKS EC coordinate short", func(t *testing.T) Config {
			bad := jwkOf(&ecKey256().PublicKey, "bad", nil)
			bad["x"] = "AAAA"
			return Config{JWKSFile: writeJWKS(t, bad)}
		}, "auth.jwks_file", "must be 32 bytes"},
		{"JWKS EC alg of another curve", func(t *testing.T) Config {
			return Config{JWKSFile: writeJWKS(t, jwkOf(&ecKey256().PublicKey, "c", map[string]any{"alg": "ES384"}))}
		}, "auth.jwks_file", "does not fit curve P-256"},
		{"JWKS RSA key without n", func(t *testing.T) Config {
			return Config{JWKSFile: writeJWKS(t, map[string]any{"kty": "RSA", "kid": "r", "e": "AQAB"})}
		}, "auth.jwks_file", "parameter n is missing"},
		{"JWKS small RSA key", func(t *testing.T) Config {
			return Config{JWKSFile: writeJWKS(t, jwkOf(&rsa1024.PublicKey, "small", nil))}
		}, "auth.jwks_file", "too small"},
		{"too many keys", func(t *testing.T) Config {
			return Config{JWKSFile: writeJWKS(t, tooMany...)}
		}, "auth.public_keys", "at most 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg(t)
			_, err := New(cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("New() = %v, want a *ConfigError", err)
			}
			if ce.Key != tt.wantKey || ce.Fix == "" {
				t.Errorf("key %q fix %q, want key %q and a fix", ce.Key, ce.Fix, tt.wantKey)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not mention %q", err, tt.wantIn)
			}
			assertNoLeak(t, err.Error(), "", append(cfg.Secrets, "c2VjcmV0"))
		})
	}
}

// TestPEMForms: every accepted PEM form loads, and one entry may hold several blocks.
func TestPEMForms(t *testing.T) {
	cert := selfSignedCert(t)
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey().PublicKey)}))
	tests := []struct {
		name  string
		entry func(t *testing.T) string
		want  int
	}{
		{"PKIX RSA", func(*testing.T) string { return pemOf(&rsaKey().PublicKey) }, 1},
		{"PKCS1 RSA", func(*testing.T) string { return pkcs1 }, 1},
		{"PKIX EC", func(*testing.T) string { return pemOf(&ecKey384().PublicKey) }, 1},
		{"certificate", func(*testing.T) string { return cert }, 1},
		{"a file of three blocks", func(t *testing.T) string {
			return writeFile(t, "keys.pem", []byte(pemOf(&rsaKey().PublicKey)+"\n"+pemOf(&ecKey256().PublicKey)+cert))
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := loadPublicKeys([]string{tt.entry(t)})
			if err != nil {
				t.Fatalf("loadPublicKeys: %v", err)
			}
			if len(keys) != tt.want {
				t.Errorf("loaded %d keys, want %d", len(keys), tt.want)
			}
		})
	}
}

func selfSignedCert(t *testing.T) string {
	t.Helper()
	key := ecKey256B()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
