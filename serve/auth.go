package serve

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Tokens are the bearer tokens a server takes, each with a name that its
// logs and per-token limits use; the tokens themselves are kept only as
// their sha256.
type Tokens struct {
	names  []string
	hashes [][sha256.Size]byte
}

// LoadTokens reads a tokens file: one "NAME TOKEN" a line, blank lines and
// lines starting with # ignored. A token is at least 16 characters.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	t := &Tokens{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 2:
			return nil, fmt.Errorf("tokens %s:%d: want NAME TOKEN", path, n)
		case len(f[1]) < 16:
			return nil, fmt.Errorf("tokens %s:%d: the token of %s is shorter than 16 characters", path, n, f[0])
		case seen[f[0]]:
			return nil, fmt.Errorf("tokens %s:%d: %s is named twice", path, n, f[0])
		}
		seen[f[0]] = true
		t.names = append(t.names, f[0])
		t.hashes = append(t.hashes, sha256.Sum256([]byte(f[1])))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens %s: %w", path, err)
	}
	if len(t.names) == 0 {
		return nil, fmt.Errorf("tokens %s: no tokens", path)
	}
	return t, nil
}

// name is the name of token; every token is compared, in constant time.
func (t *Tokens) name(token string) (string, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.hashes {
		if subtle.ConstantTimeCompare(h[:], t.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return t.names[found], true
}

// authorize checks the request's bearer token when it must have one: to
// build always, to read when the server is started with AuthReads. It
// answers the request itself when the token is missing or wrong, and
// returns the token's name.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, build bool) (string, bool) {
	if !build && !s.o.AuthReads {
		return "", true
	}
	if s.o.Tokens == nil {
		if build {
			writeError(w, r, failf(http.StatusForbidden, "", "this server takes no builds: it was started without --tokens"))
		} else {
			writeError(w, r, failf(http.StatusForbidden, "", "this server reads with tokens only, and has none"))
		}
		return "", false
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stamp"`)
		writeError(w, r, failf(http.StatusUnauthorized, "", "a bearer token is needed (Authorization: Bearer TOKEN)"))
		return "", false
	}
	name, ok := s.o.Tokens.name(token)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stamp", error="invalid_token"`)
		writeError(w, r, failf(http.StatusUnauthorized, "", "the bearer token is not one this server takes"))
		return "", false
	}
	infoOf(r).token = name
	return name, true
}
