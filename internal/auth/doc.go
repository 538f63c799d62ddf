// Package auth owns turning a client's token into an Identity: it verifies a JWT (a compact JWS)
// against the configured HS secrets, PEM public keys and JWKS file, or hands out the anonymous
// identity when that is allowed.
//
// # Rules, and why
//
//   - alg "none" is refused in every spelling, with or without a signature segment: an unsigned
//     token proves nothing. The algs that exist here are HS256/384/512, RS256/384/512,
//     PS256/384/512 and ES256/384/512, matched exactly: "hs256" is unknown, not HS256.
//   - The header's alg picks one key family, and only that family's keys are offered: HS* only
//     the configured secrets (each at least as long as the alg's hash, RFC 7518 §3.2), RS* and
//     PS* only RSA keys, ES256/384/512 only EC keys on P-256/384/521 respectively. This is the
//     defence against algorithm confusion, where a token says HS256 and is "signed" with the
//     server's public key as the HMAC secret. Behind it, each family has its own parser limited
//     by jwt.WithValidMethods to that family's algs, and the library itself refuses a key of the
//     wrong Go type. A PEM (or DER) public key configured as a secret is refused at start.
//   - Keys are chosen by the alg family, then by kid. Headers that carry or point to a key (jwk,
//     jku, x5u, x5c) are ignored: the token never chooses its own key. A kid that names no JWKS
//     key falls back to the kid-less PEM keys, and otherwise fails as an unknown kid.
//   - In a JWKS, keys whose use is not "sig", whose key_ops lack "verify", whose alg is not a
//     signature alg for their kty, or whose kty is not RSA or EC are ignored. An "oct" key above
//     all must never become an HMAC secret. A key's alg, when given, restricts it to that alg.
//     A set that carries private key material is refused.
//   - A token whose header has crit is refused: RFC 7515 requires it, since Herald implements no
//     JWS extension (b64: false would change what the signature covers).
//   - Segments are decoded strictly (base64url, no padding, no stray trailing bits), so two
//     different strings never carry the same signature. ECDSA signatures stay malleable ((r, s)
//     and (r, n-s) both verify), so a token's identity is its claims, never its bytes.
//   - The signature is checked before any claim, so a forged token is told "signature", never
//     "expired".
//   - exp is required unless auth.allow_no_expiry is set: a token that never expires can never be
//     revoked by time. nbf and iat are checked when present. All three allow Config.Leeway of
//     clock skew (DefaultLeeway, 30s). iss and aud are checked when configured.
//   - An expired token is ReasonExpired, so the session can close with the "token expired" code
//     and the client refreshes. A token not valid yet (nbf or iat ahead, beyond the leeway) is
//     ReasonNotYetValid, which the client is told the same way: a fresh token cures both. A
//     token that is expired and also wrong in another way (an nbf after its exp included) is
//     ReasonInvalid: refreshing would not help it. Everything else is ReasonInvalid, with a Stage,
//     a Detail that names what failed and a Fix that names the config key or the action.
//   - Identity.ExpiresAt is exp plus the leeway: the token is in force exactly as long as it
//     verifies, so a session never ends before a token it just accepted stops verifying.
//   - No error ever holds the token, its signature, a secret or key material, so errors may be
//     logged and sent to the client whole. Values taken from a token (a kid) are quoted and cut
//     to 64 bytes.
//   - Tokens longer than MaxTokenBytes are refused unread: the library decodes the payload before
//     it checks the signature, so the bound caps what an unauthenticated attempt can cost, as
//     maxKeys caps the signature checks one kid-less token can cause.
//
// # Lifecycle and concurrency
//
// New validates the Config and reads every key file once. A Verifier is safe for concurrent use:
// Verify reads an immutable key set through an atomic pointer, and Reload re-reads the PEM files
// and the JWKS file and swaps the whole set in, or keeps the old one if anything fails to load.
// Verify does no I/O and starts no goroutines.
package auth
