// Command jwtmint makes a signing key for the proxy benchmark's JWT-keyed rule: it writes the
// key set (the public key) to -jwks and prints a token for -sub, valid for -ttl, signed with it.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func main() {
	out := flag.String("jwks", "jwks.json", "file the key set is written to")
	sub := flag.String("sub", "alice", "the token's sub")
	ttl := flag.Duration("ttl", 24*time.Hour, "how long the token is valid")
	flag.Parse()
	if err := mint(*out, *sub, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "jwtmint:", err)
		os.Exit(1)
	}
}

func mint(out, sub string, ttl time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "bench", Algorithm: string(jose.ES256), Use: "sig"}}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, set, 0o600); err != nil {
		return err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "bench"))
	if err != nil {
		return err
	}
	now := time.Now()
	token, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: sub, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(ttl))}).Serialize()
	if err != nil {
		return err
	}
	fmt.Println(token)
	return nil
}
