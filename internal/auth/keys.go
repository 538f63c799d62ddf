package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// family is a kind of key, and the algorithms that verify with it. A token's alg picks exactly
// one family, and only keys of that family are ever offered to it: that is the whole defence
// against algorithm confusion (an HS256 token "signed" with a public key as the HMAC secret).
type family uint8

const (
	familyHMAC family = iota + 1 // shared secrets: auth.secrets only
	familyRSA                    // *rsa.PublicKey
	familyEC                     // *ecdsa.PublicKey, curve fixed by the alg
)

func (f family) String() string {
	switch f {
	case familyHMAC:
		return "HMAC secret"
	case familyRSA:
		return "RSA key"
	case familyEC:
		return "EC key"
	}
	return "unknown key family"
}

// algSpec is what an accepted alg needs from a key.
type algSpec struct {
	family    family
	minSecret int            // familyHMAC: RFC 7518 §3.2 wants a key at least the hash's size
	curve     elliptic.Curve // familyEC: ES256 is P-256 only, and so on
}

// algOrder is every alg Herald can verify, in the order they are listed in messages. "none" is
// not here and never will be; neither is EdDSA yet.
var algOrder = []string{
	"HS256", "HS384", "HS512",
	"RS256", "RS384", "RS512",
	"PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512",
}

var algs = map[string]algSpec{
	"HS256": {family: familyHMAC, minSecret: 32},
	"HS384": {family: familyHMAC, minSecret: 48},
	"HS512": {family: familyHMAC, minSecret: 64},
	"RS256": {family: familyRSA},
	"RS384": {family: familyRSA},
	"RS512": {family: familyRSA},
	"PS256": {family: familyRSA},
	"PS384": {family: familyRSA},
	"PS512": {family: familyRSA},
	"ES256": {family: familyEC, curve: elliptic.P256()},
	"ES384": {family: familyEC, curve: elliptic.P384()},
	"ES512": {family: familyEC, curve: elliptic.P521()},
}

// minRSABits is the smallest RSA modulus accepted. 1024-bit keys are within reach of a
// well-funded attacker, and every identity provider has issued 2048-bit keys for years.
const minRSABits = 2048

// maxKeys bounds the public keys loaded. A token without a kid is tried against every key of its
// alg, so the count bounds the signature checks one unauthenticated attempt can cost.
const maxKeys = 64

// publicKey is one loaded RSA or EC key.
type publicKey struct {
	kid  string           // from the JWKS; "" for PEM keys, which are tried whatever the token's kid
	alg  string           // the JWK's alg, which restricts the key to that one alg; "" allows its family
	key  crypto.PublicKey // *rsa.PublicKey or *ecdsa.PublicKey, checked by checkPublicKey
	from string           // the config key it came from, for messages
}

// fits reports whether k may verify a token of alg.
func (k publicKey) fits(alg string, spec algSpec) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch pub := k.key.(type) {
	case *rsa.PublicKey:
		return spec.family == familyRSA
	case *ecdsa.PublicKey:
		return spec.family == familyEC && pub.Curve == spec.curve
	}
	return false
}

// keySet is everything one Verify reads, loaded by New and replaced whole by Reload. It is
// immutable once built, so Verify reads it without a lock.
type keySet struct {
	secrets  [][]byte
	keys     []publicKey
	ignored  map[string]string      // kid -> why the JWKS key with that kid was ignored
	accepted []string               // algs with at least one key, in algOrder
	parsers  map[family]*jwt.Parser // one per family with an accepted alg, limited to its algs
}

// accepts reports whether alg has a key to verify against.
func (ks *keySet) accepts(alg string) bool {
	for _, a := range ks.accepted {
		if a == alg {
			return true
		}
	}
	return false
}

// candidates are the keys a token of alg and kid is checked against. HMAC secrets carry no kid
// and are all tried (that is how rotation works). For RSA and EC keys a kid that names keys
// selects exactly those; a kid that names none falls back to the kid-less PEM keys, since many
// issuers send a kid even to verifiers configured with a bare PEM key. unknownKid reports that
// the kid named nothing and there was nothing to fall back to.
func (ks *keySet) candidates(alg, kid string) (keys []jwt.VerificationKey, unknownKid bool) {
	spec, ok := algs[alg]
	if !ok {
		return nil, false
	}
	if spec.family == familyHMAC {
		for _, s := range ks.secrets {
			if len(s) >= spec.minSecret {
				keys = append(keys, s)
			}
		}
		return keys, false
	}
	var kidless []jwt.VerificationKey
	for _, k := range ks.keys {
		if !k.fits(alg, spec) {
			continue
		}
		switch {
		case kid == "":
			keys = append(keys, k.key)
		case k.kid == kid:
			keys = append(keys, k.key)
		case k.kid == "":
			kidless = append(kidless, k.key)
		}
	}
	if kid != "" && len(keys) == 0 {
		return kidless, len(kidless) == 0
	}
	return keys, false
}

// newKeySet indexes the loaded keys and builds one parser per family. The parser for a family
// accepts only that family's algs that some key can verify: the library then refuses any other
// alg before a key is even looked at, a second check behind the family chosen from the header.
func newKeySet(secrets [][]byte, keys []publicKey, ignored map[string]string, opts []jwt.ParserOption) *keySet {
	ks := &keySet{secrets: secrets, keys: keys, ignored: ignored, parsers: map[family]*jwt.Parser{}}
	byFamily := map[family][]string{}
	for _, alg := range algOrder {
		if c, _ := ks.candidates(alg, ""); len(c) > 0 {
			ks.accepted = append(ks.accepted, alg)
			f := algs[alg].family
			byFamily[f] = append(byFamily[f], alg)
		}
	}
	for f, methods := range byFamily {
		o := append([]jwt.ParserOption{jwt.WithValidMethods(methods)}, opts...)
		ks.parsers[f] = jwt.NewParser(o...)
	}
	return ks
}

// loadPublicKeys reads every auth.public_keys entry: an inline PEM string, or a PEM file's path.
func loadPublicKeys(entries []string) ([]publicKey, error) {
	var out []publicKey
	for i, e := range entries {
		from := fmt.Sprintf("auth.public_keys[%d]", i)
		data := []byte(e)
		if !strings.Contains(e, "-----BEGIN") {
			b, err := os.ReadFile(e)
			if err != nil {
				return nil, &ConfigError{Stage: "load", Key: from, Detail: "cannot read the PEM file",
					Fix: "give a readable PEM file path, or the PEM text itself", Err: err}
			}
			data = b
		}
		keys, err := parsePEM(data, from)
		if err != nil {
			return nil, err
		}
		out = append(out, keys...)
	}
	return out, nil
}

// parsePEM reads every PEM block of data as a public key.
func parsePEM(data []byte, from string) ([]publicKey, error) {
	var out []publicKey
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		where := fmt.Sprintf("PEM block %d (%s)", n, block.Type)
		var pub any
		var err error
		switch {
		case block.Type == "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(block.Bytes)
		case block.Type == "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case block.Type == "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				pub = cert.PublicKey
			}
		case strings.Contains(block.Type, "PRIVATE KEY"):
			return nil, &ConfigError{Stage: "load", Key: from,
				Detail: where + " is a private key; Herald only verifies, and a private key on it is one more place to leak from",
				Fix:    "give the public half instead: openssl pkey -in key.pem -pubout"}
		default:
			return nil, &ConfigError{Stage: "load", Key: from,
				Detail: where + " is not a public key",
				Fix:    "give PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE blocks"}
		}
		if err != nil {
			return nil, &ConfigError{Stage: "load", Key: from, Detail: where + " does not parse",
				Fix: "check the key with: openssl pkey -pubin -in key.pem -noout -text", Err: err}
		}
		if err := checkPublicKey(pub); err != nil {
			return nil, &ConfigError{Stage: "load", Key: from, Detail: where + ": " + err.Error(),
				Fix: "use an RSA key of at least 2048 bits, or an EC key on P-256, P-384 or P-521"}
		}
		out = append(out, publicKey{key: pub, from: from})
	}
	if len(out) == 0 {
		return nil, &ConfigError{Stage: "load", Key: from, Detail: "holds no PEM block",
			Fix: "give text that begins with -----BEGIN PUBLIC KEY-----, or the path of such a file"}
	}
	return out, nil
}

// checkPublicKey accepts the keys Herald can verify with and that are strong enough.
func checkPublicKey(pub any) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N == nil || k.N.BitLen() < minRSABits {
			bits := 0
			if k.N != nil {
				bits = k.N.BitLen()
			}
			return fmt.Errorf("a %d-bit RSA key is too small (at least %d bits)", bits, minRSABits)
		}
		if k.E < 3 || k.E%2 == 0 || k.E > 1<<31-1 {
			return fmt.Errorf("the RSA public exponent %d is not valid", k.E)
		}
		return nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return fmt.Errorf("EC curve %s is not supported", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return fmt.Errorf("Ed25519 (EdDSA) keys are not supported")
	}
	return fmt.Errorf("a %T is not supported", pub)
}

// secretIsPublicKey reports whether a secret is the DER encoding of a loaded public key. Validate
// already refuses a PEM secret; this catches the same mistake, or a planted config, in binary
// form, which would let anyone holding the public key mint HS256 tokens.
func secretIsPublicKey(secret []byte, keys []publicKey) bool {
	for _, k := range keys {
		if der, err := x509.MarshalPKIXPublicKey(k.key); err == nil && bytes.Equal(secret, der) {
			return true
		}
		if rk, ok := k.key.(*rsa.PublicKey); ok && bytes.Equal(secret, x509.MarshalPKCS1PublicKey(rk)) {
			return true
		}
	}
	return false
}
