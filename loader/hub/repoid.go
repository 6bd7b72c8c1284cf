package hub

import (
	"fmt"
	"regexp"
	"strings"
)

var repoPartRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$`)

// ValidateRepoID checks a model id ("org/name", or a legacy "name") with
// huggingface_hub's rules: word characters, "-" and "."; no leading or
// trailing "-"/"."; no "--" or ".."; at most 96 characters per part; not
// ending in ".git".
func ValidateRepoID(id string) error {
	parts := strings.Split(id, "/")
	if id == "" || len(parts) > 2 {
		return fmt.Errorf("repository id %q: want ORG/NAME", id)
	}
	for _, p := range parts {
		if !repoPartRE.MatchString(p) {
			return fmt.Errorf("repository id %q: %q must be 1-96 letters, digits, '_', '-' or '.', starting and ending with a letter, digit or '_'", id, p)
		}
	}
	if strings.Contains(id, "--") || strings.Contains(id, "..") {
		return fmt.Errorf("repository id %q: cannot contain \"--\" or \"..\"", id)
	}
	if strings.HasSuffix(id, ".git") {
		return fmt.Errorf("repository id %q: cannot end with \".git\"", id)
	}
	return nil
}
