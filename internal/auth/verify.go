package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Identity is who a connection is: the verified claims of its token, or the anonymous identity.
type Identity struct {
	// Subject is the token's sub claim; "" when the token has none (Supabase anon keys have
	// none) and for the anonymous identity.
	Subject string
	// Claims is the token's payload as encoding/json decodes it (numbers are float64), for the
	// policy rules' auth variable. Never nil. Shared, so read only.
	Claims map[string]any
	// ExpiresAt is when the token stops verifying: its exp plus Config.Leeway. The session must
	// end then with "token expired". Zero for the anonymous identity and for a token without
	// exp (only with AllowNoExpiry).
	ExpiresAt time.Time
	// Anonymous is true for a connection that presented no token.
	Anonymous bool
	// App is the app the token was issued for: the string claim Config.AppClaim names, ""
	// when the token has none (or it is not a string). With Subject it names the holder of
	// durable subscriptions.
	App string
}

// Verifier turns tokens into identities. It is safe for concurrent use: Verify reads one
// immutable key set through an atomic pointer, and Reload replaces that set whole.
type Verifier struct {
	cfg    Config
	leeway time.Duration
	now    func() time.Time
	keys   atomic.Pointer[keySet]
}

// New validates cfg, reads and parses its key files, and returns a Verifier.
func New(cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg, leeway: cfg.leeway(), now: cfg.now()}
	ks, err := v.load()
	if err != nil {
		return nil, err
	}
	v.keys.Store(ks)
	return v, nil
}

// Reload reads the PEM files and the JWKS file again, and swaps in the new keys only if all of
// them load: on error the Verifier keeps verifying with the keys it had. Secrets, being config
// values rather than files, do not change.
func (v *Verifier) Reload() error {
	ks, err := v.load()
	if err != nil {
		return err
	}
	v.keys.Store(ks)
	return nil
}

// load builds a key set from the config's sources.
func (v *Verifier) load() (*keySet, error) {
	secrets := make([][]byte, len(v.cfg.Secrets))
	for i, s := range v.cfg.Secrets {
		secrets[i] = []byte(s)
	}
	keys, err := loadPublicKeys(v.cfg.PublicKeys)
	if err != nil {
		return nil, err
	}
	var ignored map[string]string
	if v.cfg.JWKSFile != "" {
		jk, ig, err := loadJWKS(v.cfg.JWKSFile)
		if err != nil {
			return nil, err
		}
		keys, ignored = append(keys, jk...), ig
	}
	if len(keys) > maxKeys {
		return nil, &ConfigError{Stage: "load", Key: "auth.public_keys",
			Detail: fmt.Sprintf("%d public keys are configured; at most %d, since a token without a kid is tried against each", len(keys), maxKeys),
			Fix:    "keep only the issuer's current and next keys in auth.public_keys and auth.jwks_file"}
	}
	for i, s := range secrets {
		if secretIsPublicKey(s, keys) {
			return nil, &ConfigError{Stage: "load", Key: fmt.Sprintf("auth.secrets[%d]", i),
				Detail: "is the DER encoding of a configured public key: anyone holding the public key could sign HS256 tokens",
				Fix:    "remove it from auth.secrets; public keys belong in auth.public_keys only"}
		}
	}
	opts := []jwt.ParserOption{
		jwt.WithLeeway(v.leeway),
		jwt.WithTimeFunc(v.now),
		jwt.WithIssuedAt(),
		// Without strict decoding, the unused low bits of a segment's last base64 character
		// are ignored, so several different strings carry the same signature.
		jwt.WithStrictDecoding(),
	}
	if !v.cfg.AllowNoExpiry {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	return newKeySet(secrets, keys, ignored, opts), nil
}

// Anonymous returns the identity of a connection that presented no token, or an
// ErrAnonymousNotAllowed error when auth.allow_anonymous is off.
func (v *Verifier) Anonymous() (Identity, error) {
	if !v.cfg.AllowAnonymous {
		return Identity{}, &Error{Stage: StageConnect, Reason: ReasonAnonymousNotAllowed,
			Detail: "the connection presented no token, and this server requires one",
			Fix:    "connect with a token from your auth provider, or set auth.allow_anonymous: true on the server"}
	}
	return Identity{Claims: map[string]any{}, Anonymous: true}, nil
}

// header is what Verify reads from a token's JOSE header before any key is chosen.
type header struct {
	alg, kid string
}

// Verify checks token and returns the identity it proves. A failure is always an *Error:
// ReasonExpired for a genuine token past its exp, ReasonNotYetValid for one whose nbf or iat is
// still ahead, ReasonMissing for "", ReasonInvalid otherwise.
//
// The order matters. The header's alg picks one key family, and only that family's keys (by kid
// where the token has one) are offered; the signature is checked before any claim, so a forged
// token is told "bad signature", never "expired"; and an expired token whose claims are also
// wrong in another way is invalid, not expired, so a client does not refresh and retry a token
// that can never pass.
func (v *Verifier) Verify(token string) (Identity, error) {
	if token == "" {
		return Identity{}, &Error{Stage: StageDecode, Reason: ReasonMissing,
			Detail: "no token was given",
			Fix:    "send the token from your auth provider"}
	}
	if len(token) > MaxTokenBytes {
		return Identity{}, invalid(StageDecode, fmt.Sprintf("the token is %d bytes; at most %d are read", len(token), MaxTokenBytes),
			"issue smaller tokens: move bulky data out of the claims", nil)
	}
	h, err := readHeader(token)
	if err != nil {
		return Identity{}, err
	}
	ks := v.keys.Load()
	if strings.EqualFold(h.alg, "none") {
		return Identity{}, invalid(StageAlg, fmt.Sprintf("alg %s is refused: an unsigned token proves nothing", quoteShort(h.alg)),
			"sign tokens with "+acceptedList(ks), nil)
	}
	spec, known := algs[h.alg]
	parser := ks.parsers[spec.family]
	if !known || parser == nil || !ks.accepts(h.alg) {
		return Identity{}, invalid(StageAlg, fmt.Sprintf("alg %s is not accepted: this server has keys for %s", quoteShort(h.alg), acceptedList(ks)),
			"sign with one of those algs, or configure a key for this one: auth.secrets for HS*, auth.public_keys or auth.jwks_file for RS*, PS* and ES*", nil)
	}
	keys, unknownKid := ks.candidates(h.alg, h.kid)
	if len(keys) == 0 {
		return Identity{}, ks.noKeyError(h, spec, unknownKid)
	}
	claims := jwt.MapClaims{}
	_, err = parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		// The library decoded the same header bytes with the same decoder, so this cannot
		// differ; it is checked so that a future change to either cannot silently offer keys
		// chosen for one alg to another.
		if t.Method == nil || t.Method.Alg() != h.alg {
			return nil, errors.New("alg changed between header reads")
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	})
	if err != nil {
		return Identity{}, v.classify(err, token, h, spec, len(keys), claims)
	}
	sub, err := claims.GetSubject()
	if err != nil {
		return Identity{}, invalid(StageClaims, "the sub claim is not a string", "issue tokens whose sub is a JSON string", err)
	}
	id := Identity{Subject: sub, Claims: claims}
	if app, ok := claims[v.cfg.appClaim()].(string); ok {
		id.App = app
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		// The token verifies until exp plus the leeway, so that is when it stops being in force:
		// a session that ended at exp would refuse a token Verify has just accepted.
		id.ExpiresAt = exp.Time.Add(v.leeway)
	}
	return id, nil
}

// readHeader decodes the token's JOSE header the way the library will (strict base64url, JSON
// into a map, so duplicate and differently-cased names resolve identically), and refuses what
// Herald does not implement.
func readHeader(token string) (header, error) {
	seg, _, ok := strings.Cut(token, ".")
	if !ok || strings.Count(token, ".") != 2 {
		detail := "a token is three base64url segments joined by dots (header.payload.signature)"
		if strings.HasPrefix(strings.ToLower(token), "bearer ") {
			detail = "the token starts with \"Bearer \"; send the token alone"
		}
		return header{}, invalid(StageDecode, detail, "send the compact JWS your auth provider issued, unmodified", nil)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(seg)
	if err != nil {
		detail := "the header segment is not base64url without padding"
		if strings.HasPrefix(strings.ToLower(token), "bearer ") {
			detail = "the token starts with \"Bearer \"; send the token alone"
		}
		return header{}, invalid(StageDecode, detail, "send the compact JWS your auth provider issued, unmodified", nil)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return header{}, invalid(StageDecode, "the header is not a JSON object", "send the compact JWS your auth provider issued, unmodified", nil)
	}
	var h header
	alg, ok := m["alg"].(string)
	if !ok {
		return header{}, invalid(StageDecode, "the header has no alg string", "issue signed tokens; the header names the alg they are signed with", nil)
	}
	h.alg = alg
	if v, present := m["kid"]; present {
		if h.kid, ok = v.(string); !ok {
			return header{}, invalid(StageDecode, "the header's kid is not a string", "issue tokens whose kid is a JSON string", nil)
		}
	}
	if _, present := m["crit"]; present {
		// RFC 7515 §4.1.11: a verifier must refuse a token whose crit names an extension it does
		// not understand, and Herald understands none (b64: false would change what is signed).
		return header{}, invalid(StageDecode, "the header has crit: this server implements no JWS extensions", "issue tokens without the crit header", nil)
	}
	return h, nil
}

// noKeyError explains why no key was offered to a token whose alg is accepted.
func (ks *keySet) noKeyError(h header, spec algSpec, unknownKid bool) error {
	if unknownKid {
		if why, ok := ks.ignored[h.kid]; ok {
			return invalid(StageKey, fmt.Sprintf("kid %s names a key in auth.jwks_file that is ignored: %s", quoteShort(h.kid), why),
				"sign with a signing key (use sig, kty RSA or EC), and publish it in auth.jwks_file", nil)
		}
		return invalid(StageKey, fmt.Sprintf("kid %s names no %s for %s in auth.jwks_file", quoteShort(h.kid), spec.family, h.alg),
			"add the issuer's current keys to auth.jwks_file and reload Herald; if the issuer rotated its keys, fetch its JWKS again", nil)
	}
	return invalid(StageKey, fmt.Sprintf("no %s can verify %s", spec.family, h.alg),
		"configure a key for this alg: auth.secrets for HS*, auth.public_keys or auth.jwks_file for RS*, PS* and ES*", nil)
}

// classify turns a library error into an *Error that names what failed.
func (v *Verifier) classify(err error, token string, h header, spec algSpec, tried int, claims jwt.MapClaims) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		_, rest, _ := strings.Cut(token, ".")
		payload, _, _ := strings.Cut(rest, ".")
		detail := "the signature segment is not base64url without padding"
		if raw, derr := base64.RawURLEncoding.Strict().DecodeString(payload); derr != nil {
			detail = "the payload segment is not base64url without padding"
		} else if !json.Valid(raw) || !strings.HasPrefix(strings.TrimSpace(string(raw)), "{") {
			detail = "the payload is not a JSON object"
		}
		return invalid(StageDecode, detail, "send the compact JWS your auth provider issued, unmodified", err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		fix := "sign with the private key whose public half is in auth.public_keys or auth.jwks_file; if the issuer rotated keys, update them and reload Herald"
		if spec.family == familyHMAC {
			fix = "sign with a secret listed in auth.secrets: the issuer and Herald must share it byte for byte"
		}
		what := spec.family.String()
		if tried != 1 {
			what += "s"
		}
		detail := fmt.Sprintf("the %s signature does not verify with the %d %s that could have made it", h.alg, tried, what)
		if h.kid != "" && spec.family != familyHMAC {
			detail += fmt.Sprintf(" (kid %s)", quoteShort(h.kid))
		}
		return invalid(StageSignature, detail, fix, err)
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return v.claimsError(err, claims)
	}
	return invalid(StageDecode, "the token could not be verified", "send the compact JWS your auth provider issued, unmodified", err)
}

// claimsError explains a claims failure of a token whose signature verified. Expiry is reported
// only when it is the only failure.
func (v *Verifier) claimsError(err error, claims jwt.MapClaims) error {
	now := v.now()
	switch {
	case errors.Is(err, jwt.ErrInvalidType):
		name, want := mistypedClaim(claims)
		return invalid(StageClaims, fmt.Sprintf("the %s claim is not %s", name, want),
			fmt.Sprintf("issue tokens whose %s is %s", name, want), err)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		if exp, _ := claims.GetExpirationTime(); exp == nil && !v.cfg.AllowNoExpiry {
			return invalid(StageClaims, "the token has no exp claim, and this server requires tokens to expire",
				"issue tokens with an exp claim (a lifetime of minutes to hours), or set auth.allow_no_expiry: true to accept tokens that never expire", err)
		}
		if iss, _ := claims.GetIssuer(); iss == "" && v.cfg.Issuer != "" {
			return invalid(StageClaims, fmt.Sprintf("the token has no iss claim; auth.issuer requires %q", v.cfg.Issuer),
				fmt.Sprintf("issue tokens with iss %q, or unset auth.issuer", v.cfg.Issuer), err)
		}
		if _, present := claims["aud"]; present {
			// The library reads an aud of any other JSON type as absent.
			return invalid(StageClaims, "the aud claim is not a string or an array of strings",
				"issue tokens whose aud is a string or an array of strings", err)
		}
		return invalid(StageClaims, fmt.Sprintf("the token has no aud claim; auth.audience requires %q", v.cfg.Audience),
			fmt.Sprintf("issue tokens with aud %q, or unset auth.audience", v.cfg.Audience), err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return invalid(StageClaims, fmt.Sprintf("the iss claim is not %q, the issuer auth.issuer names", v.cfg.Issuer),
			fmt.Sprintf("issue tokens with iss %q, or set auth.issuer to the issuer your tokens carry", v.cfg.Issuer), err)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return invalid(StageClaims, fmt.Sprintf("the aud claim does not include %q, the audience auth.audience names", v.cfg.Audience),
			fmt.Sprintf("issue tokens for audience %q, or set auth.audience to the audience your tokens carry", v.cfg.Audience), err)
	case (errors.Is(err, jwt.ErrTokenNotValidYet) || errors.Is(err, jwt.ErrTokenUsedBeforeIssued)) && errors.Is(err, jwt.ErrTokenExpired):
		// Valid only after it expired: no clock makes it pass, so a refresh cannot help.
		exp, _ := claims.GetExpirationTime()
		return invalid(StageClaims, fmt.Sprintf("the token expired at %s (exp), yet its nbf or iat is still ahead: it is valid at no time", stamp(exp)),
			"issue tokens whose nbf and iat are before their exp", err)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		nbf, _ := claims.GetNotBefore()
		return &Error{Stage: StageClaims, Reason: ReasonNotYetValid,
			Detail: fmt.Sprintf("the token is not valid before %s (nbf), %s from now, beyond the %s leeway",
				stamp(nbf), until(nbf, now), v.leeway),
			Fix: "use the token once its nbf has passed, or fix the issuer's clock (NTP); auth.leeway allows for skew", Err: err}
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		iat, _ := claims.GetIssuedAt()
		return &Error{Stage: StageClaims, Reason: ReasonNotYetValid,
			Detail: fmt.Sprintf("the token was issued at %s (iat), %s in the future, beyond the %s leeway",
				stamp(iat), until(iat, now), v.leeway),
			Fix: "fix the issuer's clock (NTP); auth.leeway allows for skew", Err: err}
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := claims.GetExpirationTime()
		ago := "?"
		if exp != nil {
			ago = now.Sub(exp.Time).Round(time.Second).String()
		}
		return &Error{Stage: StageClaims, Reason: ReasonExpired,
			Detail: fmt.Sprintf("the token expired at %s, %s ago (leeway %s)", stamp(exp), ago, v.leeway),
			Fix:    "get a fresh token from your auth provider and reconnect", Err: err}
	}
	return invalid(StageClaims, "the token's claims are not valid", "check exp, nbf, iat, iss and aud", err)
}

// mistypedClaim names the first registered claim of the wrong JSON type.
func mistypedClaim(c jwt.MapClaims) (name, want string) {
	if _, err := c.GetExpirationTime(); err != nil {
		return "exp", "a number of seconds"
	}
	if _, err := c.GetNotBefore(); err != nil {
		return "nbf", "a number of seconds"
	}
	if _, err := c.GetIssuedAt(); err != nil {
		return "iat", "a number of seconds"
	}
	if _, err := c.GetIssuer(); err != nil {
		return "iss", "a string"
	}
	if _, err := c.GetAudience(); err != nil {
		return "aud", "a string or an array of strings"
	}
	return "sub", "a string"
}

func stamp(d *jwt.NumericDate) string {
	if d == nil {
		return "?"
	}
	return d.UTC().Format(time.RFC3339)
}

func until(d *jwt.NumericDate, now time.Time) string {
	if d == nil {
		return "?"
	}
	return d.Sub(now).Round(time.Second).String()
}

func acceptedList(ks *keySet) string {
	if len(ks.accepted) == 0 {
		return "no alg at all (no secrets or public keys are configured)"
	}
	return strings.Join(ks.accepted, ", ")
}

func invalid(stage Stage, detail, fix string, err error) *Error {
	return &Error{Stage: stage, Reason: ReasonInvalid, Detail: detail, Fix: fix, Err: err}
}
