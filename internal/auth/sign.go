package auth

import (
	"fmt"

	"github.com/golang-jwt/jwt/v5"
)

// SignHS256 mints a token that a verifier holding secret among its HS256 secrets accepts, with
// claims as its payload. It is for tools that act as a token issuer of their own (herald bench's
// policy mode), not for the server, which only verifies.
func SignHS256(secret string, claims map[string]any) (string, error) {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims)).SignedString([]byte(secret))
	if err != nil {
		return "", fmt.Errorf("auth: sign a token: %w", err)
	}
	return tok, nil
}
