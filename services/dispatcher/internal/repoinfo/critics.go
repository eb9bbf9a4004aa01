package repoinfo

import (
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// maxRepoCritics bounds the names RepoCritics returns.
const maxRepoCritics = 16

// RepoCritics are the names of the critics the repository's own harness
// configuration declares (reviews.critics[].name), as the original read
// them. They are never run — critics are the operator's, the checkout is
// the agent's (docs/decisions/120-critics.md) — only named, so that
// `the-loop critic list` can say why they are not listed. A missing or
// broken configuration names none.
func RepoCritics(root string) []string {
	r, err := openRoot(root)
	if err != nil {
		return nil
	}
	defer r.Close()
	cfg, _ := readConfig(r)
	list := deref(cfg.get("reviews", "critics"))
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil
	}
	var out []string
	for _, it := range list.Content {
		name, ok := scalar(lookup(it, "name"))
		if !ok || name == "" || len(name) > 64 || !utf8.ValidString(name) {
			continue
		}
		if out = append(out, name); len(out) == maxRepoCritics {
			break
		}
	}
	return out
}
