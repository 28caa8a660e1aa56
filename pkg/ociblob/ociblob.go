package ociblob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/edgefleet/fleet/pkg/contract/ociref"
)

// maxTokenResponse bounds what a token endpoint may send.
const maxTokenResponse = 1 << 20

// Get asks the registry for the blob of digest sha256:hex with header's
// fields (a Range), answering a bearer-token challenge once with an
// anonymous pull token. The caller reads and closes the response, whatever
// its status.
func Get(ctx context.Context, client *http.Client, ref ociref.Ref, sha256Hex string, header http.Header) (*http.Response, error) {
	get := func(token string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref.BlobURL(sha256Hex), nil)
		if err != nil {
			return nil, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return client.Do(req)
	}
	resp, err := get("")
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	challenge := resp.Header.Get("WWW-Authenticate")
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	token, err := anonymousToken(ctx, client, ref, challenge)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", ref.Registry, err)
	}
	return get(token)
}

// anonymousToken answers a Bearer challenge: the token the realm gives for
// pulling the repository without credentials.
func anonymousToken(ctx context.Context, client *http.Client, ref ociref.Ref, challenge string) (string, error) {
	scheme, params, _ := strings.Cut(challenge, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("asks for credentials (%q); fleet pulls anonymously: make the repository public, or carry the archive by url or through the hub", challenge)
	}
	p := challengeParams(params)
	realm, err := url.Parse(p["realm"])
	if err != nil || realm.Scheme != "https" || realm.Host == "" {
		return "", fmt.Errorf("its token realm %q is not an https URL", p["realm"])
	}
	q := realm.Query()
	if p["service"] != "" {
		q.Set("service", p["service"])
	}
	scope := p["scope"]
	if scope == "" {
		scope = "repository:" + ref.Repository + ":pull"
	}
	q.Set("scope", scope)
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("asking %s for a pull token: %w", realm.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("asking %s for a pull token: %s (a private repository? fleet pulls anonymously)", realm.Host, resp.Status)
	}
	var t struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTokenResponse)).Decode(&t); err != nil {
		return "", fmt.Errorf("reading the pull token from %s: %w", realm.Host, err)
	}
	if t.Token == "" {
		t.Token = t.AccessToken
	}
	if t.Token == "" {
		return "", errors.New("its token endpoint " + realm.Host + " gave no token")
	}
	return t.Token, nil
}

// challengeParams reads k="v",k2="v2" (values may hold commas).
func challengeParams(s string) map[string]string {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				break
			}
			v, rest = rest[1:1+end], rest[2+end:]
		} else {
			v, rest, _ = strings.Cut(rest, ",")
			rest = "," + rest
		}
		out[k] = v
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ","))
	}
	return out
}
