package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"os"
	"slices"
	"strings"
)

// maxJWKSBytes bounds the JWKS file read. Real sets are a few kilobytes; a larger file is a wrong
// path, not a key set.
const maxJWKSBytes = 1 << 20

// jwk is the part of a JSON Web Key (RFC 7517, RFC 7518 §6) Herald reads. Everything else,
// x5c and x5u included, is ignored: keys come from n/e and crv/x/y only.
type jwk struct {
	Kty    string   `json:"kty"`
	Use    string   `json:"use"`
	KeyOps []string `json:"key_ops"`
	Alg    string   `json:"alg"`
	Kid    string   `json:"kid"`
	N      string   `json:"n"`
	E      string   `json:"e"`
	Crv    string   `json:"crv"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
	D      string   `json:"d"` // only read to refuse a set that carries private keys
}

// loadJWKS reads the key set at path. Keys that are not for signature verification, or of a kty
// Herald does not verify with, are ignored and remembered by kid, so a token naming one of them
// gets a precise error; a key Herald should use but cannot parse fails the whole load.
func loadJWKS(path string) (keys []publicKey, ignored map[string]string, err error) {
	const key = "auth.jwks_file"
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, &ConfigError{Stage: "load", Key: key, Detail: "cannot open the JWKS file",
			Fix: "set auth.jwks_file to a readable file holding your issuer's JSON Web Key Set", Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJWKSBytes+1))
	if err != nil {
		return nil, nil, &ConfigError{Stage: "load", Key: key, Detail: "cannot read the JWKS file",
			Fix: "check the file and its permissions", Err: err}
	}
	if len(data) > maxJWKSBytes {
		return nil, nil, &ConfigError{Stage: "load", Key: key,
			Detail: fmt.Sprintf("the file is larger than %d bytes, too large for a key set", maxJWKSBytes),
			Fix:    "point auth.jwks_file at the issuer's JWKS document (often /.well-known/jwks.json)"}
	}
	return parseJWKS(data)
}

// parseJWKS reads a JWKS document. See loadJWKS.
func parseJWKS(data []byte) (keys []publicKey, ignored map[string]string, err error) {
	const key = "auth.jwks_file"
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, nil, &ConfigError{Stage: "load", Key: key, Detail: "is not a JSON Web Key Set",
			Fix: `give a JSON document of the form {"keys": [...]}`, Err: err}
	}
	ignored = map[string]string{}
	for i, raw := range set.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, nil, &ConfigError{Stage: "load", Key: key,
				Detail: fmt.Sprintf("key %d is not a JSON Web Key", i),
				Fix:    "give each key as an object with kty and its parameters", Err: err}
		}
		where := fmt.Sprintf("key %d (kid %s)", i, quoteShort(k.Kid))
		if k.D != "" {
			return nil, nil, &ConfigError{Stage: "load", Key: key,
				Detail: where + " holds private key material (d); Herald only verifies",
				Fix:    "publish only the public keys: remove d, p, q, dp, dq and qi from the set"}
		}
		if why := skipReason(k); why != "" {
			if k.Kid != "" {
				ignored[k.Kid] = why
			}
			continue
		}
		pub, err := k.publicKey()
		if err == nil {
			err = checkPublicKey(pub)
		}
		if err != nil {
			return nil, nil, &ConfigError{Stage: "load", Key: key, Detail: where + ": " + err.Error(),
				Fix: "fetch the key set again from the issuer; a key it publishes must be an RSA key of at least 2048 bits or an EC key on P-256, P-384 or P-521"}
		}
		keys = append(keys, publicKey{kid: k.Kid, alg: k.Alg, key: pub, from: key})
	}
	if len(keys) == 0 {
		return nil, nil, &ConfigError{Stage: "load", Key: key,
			Detail: fmt.Sprintf("holds no usable signing key: all %d keys were ignored (use not sig, key_ops without verify, or kty not RSA or EC)", len(set.Keys)),
			Fix:    "give the issuer's signing keys: kty RSA or EC, with use sig or no use"}
	}
	return keys, ignored, nil
}

// skipReason says why a key is not for Herald, or "" when it is.
func skipReason(k jwk) string {
	switch {
	case k.Use != "" && k.Use != "sig":
		return fmt.Sprintf("its use is %s, not sig", quoteShort(k.Use))
	case k.KeyOps != nil && !slices.Contains(k.KeyOps, "verify"):
		return "its key_ops do not include verify"
	case k.Kty != "RSA" && k.Kty != "EC":
		// "oct" keys above all: a symmetric key in a key set must never become an HMAC secret,
		// or the set's publisher (or whoever can read it) could sign tokens.
		return fmt.Sprintf("its kty %s is not RSA or EC", quoteShort(k.Kty))
	case k.Alg != "":
		spec, ok := algs[k.Alg]
		if !ok || spec.family == familyHMAC {
			return fmt.Sprintf("its alg %s is not a signature alg Herald verifies", quoteShort(k.Alg))
		}
		if (k.Kty == "RSA") != (spec.family == familyRSA) {
			return fmt.Sprintf("its alg %s does not fit its kty %s", quoteShort(k.Alg), quoteShort(k.Kty))
		}
	}
	return ""
}

// publicKey builds the key from n/e or crv/x/y.
func (k jwk) publicKey() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64(k.N, "n")
		if err != nil {
			return nil, err
		}
		e, err := b64(k.E, "e")
		if err != nil {
			return nil, err
		}
		if len(e) > 4 {
			return nil, fmt.Errorf("the RSA exponent e is %d bytes, more than fits", len(e))
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("EC curve %s is not supported", quoteShort(k.Crv))
		}
		if k.Alg != "" && algs[k.Alg].curve != curve {
			return nil, fmt.Errorf("alg %s does not fit curve %s", quoteShort(k.Alg), k.Crv)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, err := b64(k.X, "x")
		if err != nil {
			return nil, err
		}
		y, err := b64(k.Y, "y")
		if err != nil {
			return nil, err
		}
		// RFC 7518 §6.2.1.2: the coordinates are exactly the field size, leading zeros kept.
		if len(x) != size || len(y) != size {
			return nil, fmt.Errorf("x and y must be %d bytes each for %s", size, k.Crv)
		}
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, fmt.Errorf("x and y are not a point on %s", k.Crv)
		}
		return pub, nil
	}
	return nil, fmt.Errorf("kty %s is not supported", quoteShort(k.Kty))
}

// b64 decodes a base64url JWK parameter. Padding is tolerated, since some publishers add it.
func b64(s, name string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("parameter %s is missing", name)
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, fmt.Errorf("parameter %s is not base64url", name)
	}
	return b, nil
}

// quoteShort quotes a value taken from a token or a key set for a message, cut to 64 bytes: enough
// to recognise a kid, too little to carry anything else along.
func quoteShort(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
