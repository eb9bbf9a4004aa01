package repoinfo

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// Bounds on the text an Instructions answer carries.
const (
	// MaxDocBytes caps one document's text.
	MaxDocBytes = 64 << 10
	// MaxDocsBytes caps the text of all documents of one answer.
	MaxDocsBytes = 256 << 10
)

// Keys of sessionapi.Instructions.Notes besides the documents' own paths.
const (
	// NoteConfig: why the harness configuration gave no documents, or what
	// in it was ignored.
	NoteConfig = "harness-config"
	// NoteStep: why no document of the current step is listed.
	NoteStep = "step"
)

// What customInstructions.onMissing may say about a registered document
// that is missing.
const (
	// OnMissingWarn (the default) notes it.
	OnMissingWarn = "warn"
	// OnMissingError notes it as an error. The request still succeeds: the
	// agent decides what an error means to its step.
	OnMissingError = "error"
	// OnMissingIgnore notes nothing; the document is still listed as
	// missing.
	OnMissingIgnore = "ignore"
)

// Instructions answers sessionapi.PathInstructions for the checkout at
// root and the work item's current node and phase (the caller fills Ref).
//
// Docs are the documents the repository registers in ConfigPath under
// customInstructions.docs, in their order (a later one wins where two
// disagree), followed by the current step's own document: StepDir/<node>.md,
// else StepDir/<phase>.md, listed with Step set when either is there. Each
// document has a state (sessionapi.DocPresent, DocMissing, DocUnreadable,
// DocInvalid); a present one carries its text, at most MaxDocBytes of it and
// MaxDocsBytes for all (the step's document is served first, being the most
// specific), with a note under the document's path when it was cut.
//
// A missing or broken configuration gives no registered documents and a
// note under NoteConfig; the only error is ErrNoWorkspace.
func Instructions(root, node, phase string) (sessionapi.Instructions, error) {
	out := sessionapi.Instructions{Node: node, Phase: phase, Docs: []sessionapi.InstructionDoc{}}
	r, err := openRoot(root)
	if err != nil {
		return out, err
	}
	defer r.Close()

	notes := map[string]string{}
	budget := MaxDocsBytes

	// The step's document is read first so that the budget serves it first;
	// it is listed last, after the documents it may override.
	step, stepNote := stepDoc(r, node, phase, &budget, notes)
	if stepNote != "" {
		addNote(notes, NoteStep, stepNote)
	}

	cfg, note := readConfig(r)
	if note != "" {
		addNote(notes, NoteConfig, note)
	}
	out.Docs = append(out.Docs, registered(r, cfg, &budget, notes)...)
	if step != nil {
		out.Docs = append(out.Docs, *step)
	}
	if len(notes) > 0 {
		out.Notes = notes
	}
	return out, nil
}

// stepDoc is the current step's own document, nil with a note when there is
// none.
func stepDoc(r *os.Root, node, phase string, budget *int, notes map[string]string) (*sessionapi.InstructionDoc, string) {
	names := []string{node}
	if phase != node {
		names = append(names, phase)
	}
	var tried, bad []string
	for _, name := range names {
		if name == "" {
			continue
		}
		if !isStepName(name) {
			bad = append(bad, strconv.Quote(name))
			continue
		}
		p := StepDir + "/" + name + ".md"
		tried = append(tried, p)
		d := sessionapi.InstructionDoc{Path: p, Step: true}
		read(r, &d, budget, notes)
		if d.State != sessionapi.DocMissing {
			return &d, ""
		}
	}
	var why []string
	if len(tried) > 0 {
		why = append(why, "no "+strings.Join(tried, " or "))
	}
	if len(bad) > 0 {
		why = append(why, strings.Join(bad, " and ")+" cannot name a document in "+StepDir)
	}
	return nil, strings.Join(why, "; ")
}

// isStepName: name is one plain path segment.
func isStepName(name string) bool {
	return name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00")
}

// registered lists customInstructions.docs.
func registered(r *os.Root, cfg *config, budget *int, notes map[string]string) []sessionapi.InstructionDoc {
	ci := cfg.get("customInstructions")
	if ci == nil {
		return nil
	}
	onMissing := OnMissingWarn
	if n := lookup(ci, "onMissing"); n != nil {
		switch v, _ := scalar(n); v {
		case OnMissingWarn, OnMissingError, OnMissingIgnore:
			onMissing = v
		default:
			addNote(notes, NoteConfig, fmt.Sprintf("customInstructions.onMissing %q is none of warn, error, ignore; warn is used", v))
		}
	}
	list := lookup(ci, "docs")
	if list == nil {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		addNote(notes, NoteConfig, "customInstructions.docs is not a list; no documents are registered")
		return nil
	}
	var docs []sessionapi.InstructionDoc
	for i, e := range list.Content {
		entry := "customInstructions.docs[" + strconv.Itoa(i) + "]"
		d, bad := entryDoc(e)
		if bad != "" {
			d.State = sessionapi.DocInvalid
			key := d.Path
			if strings.TrimSpace(key) == "" {
				key = entry
			}
			addNote(notes, key, entry+" "+bad)
			docs = append(docs, d)
			continue
		}
		read(r, &d, budget, notes)
		if d.State == sessionapi.DocMissing {
			switch onMissing {
			case OnMissingWarn:
				addNote(notes, d.Path, "missing: the repository registers it but nothing is there")
			case OnMissingError:
				addNote(notes, d.Path, "error: the repository registers it, requires it (onMissing: error), and nothing is there")
			}
		}
		docs = append(docs, d)
	}
	return docs
}

// entryDoc is the document an entry of customInstructions.docs registers,
// or why the entry is invalid.
func entryDoc(e *yaml.Node) (sessionapi.InstructionDoc, string) {
	var d sessionapi.InstructionDoc
	e = deref(e)
	if e == nil || e.Kind != yaml.MappingNode {
		return d, "is not a mapping with a path"
	}
	if n, ok := scalar(lookup(e, "notes")); ok {
		d.Notes = n
	}
	pn := lookup(e, "path")
	if pn == nil {
		return d, "has no path"
	}
	p, ok := scalar(pn)
	if !ok {
		return d, "has a path that is not a string"
	}
	d.Path = p
	switch {
	case strings.TrimSpace(p) == "":
		return d, "has a blank path"
	case isAbs(p):
		return d, "has an absolute path; paths are relative to the repository"
	case strings.ContainsRune(p, 0):
		return d, "has a path with a NUL byte"
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return d, `has a path with "..", which could leave the repository`
		}
	}
	return d, ""
}

// read fills d's state and text from its path in r, spending budget.
func read(r *os.Root, d *sessionapi.InstructionDoc, budget *int, notes map[string]string) {
	name := path.Clean(d.Path)
	b, size, more, err := readCapped(r, name, MaxDocBytes+utf8.UTFMax)
	switch {
	case isMissing(err):
		d.State = sessionapi.DocMissing
		return
	case err != nil:
		d.State = sessionapi.DocUnreadable
		addNote(notes, d.Path, "unreadable: "+why(err))
		return
	}
	d.State = sessionapi.DocPresent
	d.Bytes = int(size)
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	limit, by := MaxDocBytes, fmt.Sprintf("%d KiB per document", MaxDocBytes>>10)
	if *budget < limit {
		limit, by = *budget, fmt.Sprintf("%d KiB for all documents", MaxDocsBytes>>10)
	}
	cut := more
	if len(text) > limit {
		text, cut = cutUTF8(text, limit), true
	}
	*budget -= len(text)
	d.Text = text
	if cut {
		if text == "" {
			addNote(notes, d.Path, "text left out: the "+by+" are spent")
			return
		}
		addNote(notes, d.Path, fmt.Sprintf("truncated: %d of its %d bytes are included (%s)", len(text), size, by))
	}
}

// cutUTF8 is the longest prefix of s of at most n bytes that does not split
// a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// addNote adds note under key, after what is there already.
func addNote(notes map[string]string, key, note string) {
	prev := notes[key]
	switch {
	case prev == note:
		return
	case prev != "":
		note = prev + "; " + note
	}
	notes[key] = note
}
