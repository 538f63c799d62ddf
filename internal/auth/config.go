package auth

import (
	"fmt"
	"strings"
	"time"
)

// DefaultLeeway is the clock skew allowed on exp, nbf and iat when Config.Leeway is zero. Thirty
// seconds absorbs the drift of hosts that run NTP and the time a token spends in flight, while
// keeping an expired token usable for at most half a minute more.
const DefaultLeeway = 30 * time.Second

// MaxLeeway bounds Config.Leeway. A larger skew would quietly extend every token's life by that
// much; a clock that far off should be fixed, not tolerated.
const MaxLeeway = 5 * time.Minute

// MinSecretBytes is the shortest HS256 secret accepted: 256 bits, the size of the HMAC-SHA256
// output that RFC 7518 §3.2 requires as the key size. A shorter secret can be guessed offline
// from any one token it signed.
const MinSecretBytes = 32

// MaxTokenBytes bounds the token Verify will look at. The library decodes the payload's JSON
// before the signature is checked, so without a bound an unauthenticated client chooses how much
// work and memory each attempt costs. Real tokens, even ones carrying group lists, stay well
// under it.
const MaxTokenBytes = 16 << 10

// Config says which tokens a Verifier accepts. The zero value accepts nothing, and fails
// Validate: set at least one key source, or AllowAnonymous.
type Config struct {
	// Secrets are HS256/HS384/HS512 shared secrets (config auth.secrets, env HERALD_AUTH_SECRETS),
	// used as raw bytes. Several may be listed to rotate: a token verifies if any one matches.
	// Each must be at least MinSecretBytes long; HS384 and HS512 tokens are only checked against
	// secrets at least 48 and 64 bytes long.
	Secrets []string

	// PublicKeys (auth.public_keys) are PEM strings or paths to PEM files holding RSA (at least
	// 2048 bits) or EC (P-256, P-384, P-521) public keys, as PUBLIC KEY, RSA PUBLIC KEY or
	// CERTIFICATE blocks; one entry may hold several blocks. A certificate is only a container for
	// its key: its dates and chain are not checked. Files are read by New and Reload.
	PublicKeys []string

	// JWKSFile (auth.jwks_file) is the path of a JSON Web Key Set (RFC 7517) holding RSA and EC
	// keys, selected by a token's kid. Keys whose use is not "sig", whose key_ops lack "verify",
	// or whose kty is not RSA or EC are ignored. Read by New and Reload.
	JWKSFile string

	// Issuer (auth.issuer), when set, must equal the token's iss claim.
	Issuer string
	// Audience (auth.audience), when set, must be one of the token's aud values.
	Audience string

	// Leeway (auth.leeway) is the clock skew allowed on exp, nbf and iat. Zero means
	// DefaultLeeway; a negative value means no skew at all. At most MaxLeeway.
	Leeway time.Duration

	// AllowNoExpiry (auth.allow_no_expiry) accepts tokens without an exp claim. Off by default:
	// a token that never expires can never be revoked by time, so one leaked token is a
	// credential forever.
	AllowNoExpiry bool

	// AllowAnonymous (auth.allow_anonymous) lets a connection without a token in, with the
	// anonymous identity. A token that is present is still verified, and refused if bad.
	AllowAnonymous bool

	// AppClaim (auth.app_claim) names the claim that says which app a token was issued for
	// (Identity.App), a string; "" means DefaultAppClaim. A durable subscription belongs to
	// the token's subject and app.
	AppClaim string

	// Now is the clock. Nil means time.Now. Tests inject a fixed one.
	Now func() time.Time
}

// DefaultAppClaim is the claim Identity.App is read from when Config.AppClaim is empty.
const DefaultAppClaim = "app"

func (c Config) appClaim() string {
	if c.AppClaim == "" {
		return DefaultAppClaim
	}
	return c.AppClaim
}

// hasKeySource reports whether any way of verifying a token is configured.
func (c Config) hasKeySource() bool {
	return len(c.Secrets) > 0 || len(c.PublicKeys) > 0 || c.JWKSFile != ""
}

// leeway resolves the zero and negative values of Leeway.
func (c Config) leeway() time.Duration {
	switch {
	case c.Leeway == 0:
		return DefaultLeeway
	case c.Leeway < 0:
		return 0
	}
	return c.Leeway
}

func (c Config) now() func() time.Time {
	if c.Now != nil {
		return c.Now
	}
	return time.Now
}

// Validate checks the Config without reading any file: key files are read and parsed by New.
// Its errors are *ConfigError, and never quote a secret.
func (c Config) Validate() error {
	if !c.hasKeySource() && !c.AllowAnonymous {
		return &ConfigError{
			Stage: "config",
			Key:   "auth",
			Detail: "nothing to verify tokens with: auth.secrets, auth.public_keys and " +
				"auth.jwks_file are all empty, and auth.allow_anonymous is false, so no client " +
				"could ever connect",
			Fix: "set auth.secrets (env HERALD_AUTH_SECRETS) to your token issuer's HS256 secret, " +
				"or auth.public_keys or auth.jwks_file to its public keys; or set " +
				"auth.allow_anonymous: true to let clients in without a token",
		}
	}
	for i, s := range c.Secrets {
		key := fmt.Sprintf("auth.secrets[%d]", i)
		switch {
		case strings.HasPrefix(strings.TrimSpace(s), "-----BEGIN"):
			// An HMAC secret that is a public key lets anyone who has the public key sign
			// tokens: the algorithm-confusion attack, configured by hand.
			return &ConfigError{
				Stage:  "config",
				Key:    key,
				Detail: "is a PEM block: a public key used as an HMAC secret lets anyone who holds the public key sign tokens",
				Fix:    "move the PEM key to auth.public_keys, and keep only shared secrets in auth.secrets",
			}
		case len(s) < MinSecretBytes:
			return &ConfigError{
				Stage: "config",
				Key:   key,
				Detail: fmt.Sprintf("is %d bytes; an HS256 secret needs at least %d, or it can be "+
					"guessed offline from any token it signed", len(s), MinSecretBytes),
				Fix: "generate a secret with: openssl rand -base64 48   # and configure the same one at your token issuer",
			}
		case strings.TrimSpace(s) != s:
			// Almost always a newline carried over from a file or a heredoc. The issuer signs
			// without it, so every token would fail with a signature error far from the cause.
			return &ConfigError{
				Stage:  "config",
				Key:    key,
				Detail: "begins or ends with whitespace (often a trailing newline from a file), which the token issuer almost certainly does not sign with",
				Fix:    "remove the surrounding whitespace from the secret",
			}
		}
	}
	for i, p := range c.PublicKeys {
		if strings.TrimSpace(p) == "" {
			return &ConfigError{
				Stage:  "config",
				Key:    fmt.Sprintf("auth.public_keys[%d]", i),
				Detail: "is empty",
				Fix:    "give a PEM public key or the path of a PEM file, or remove the entry",
			}
		}
	}
	if c.Leeway > MaxLeeway {
		return &ConfigError{
			Stage: "config",
			Key:   "auth.leeway",
			Detail: fmt.Sprintf("is %s; more than %s of clock skew extends every token's life by as much",
				c.Leeway, MaxLeeway),
			Fix: "synchronise the clocks (NTP) and set auth.leeway to 30s or less",
		}
	}
	return nil
}
