package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// identitiesDir is where `up` and `auth init` keep bus identities' seeds,
// under a store or output directory.
const identitiesDir = "nats"

// natsCredentials is the credential the environment gives this process.
// Which one is in force when several are set is bus.Credentials' to say
// (Kind); its Setting names the variable that holds it, for messages.
func natsCredentials(n config.NATS) bus.Credentials {
	c := bus.Credentials{
		SeedFile:  n.NkeyFile,
		Seed:      []byte(n.NkeySeed.Reveal()),
		CredsFile: n.CredsFile,
		User:      n.User,
		Password:  n.Password.Reveal(),
		CAFile:    n.TLSCA,
		// A user and password sign with this seed; the connection
		// refuses to start as an identity without one.
		SigningSeedFile: n.SigningSeedFile,
		CertFile:        n.TLSCert,
		KeyFile:         n.TLSKey,
	}
	switch c.Kind() {
	case "nkey":
		c.Setting = "LOOP_NATS_NKEY_SEED"
		if n.NkeyFile != "" {
			c.Setting = "LOOP_NATS_NKEY_FILE"
		}
	case "creds":
		c.Setting = "LOOP_NATS_CREDS_FILE"
	case "user":
		c.Setting = "LOOP_NATS_USER"
	default:
		c.Setting = "LOOP_NATS_NKEY_FILE, LOOP_NATS_NKEY_SEED, LOOP_NATS_CREDS_FILE or LOOP_NATS_USER"
	}
	return c
}

// identityKeys are the NKey seeds of a server's users and the users
// themselves.
type identityKeys struct {
	seeds map[string][]byte
	users []bus.User
}

// credentials is identity's in-memory credential.
func (k identityKeys) credentials(identity string) bus.Credentials {
	return bus.Credentials{Seed: k.seeds[identity], Setting: "the identity `up` issued to " + identity}
}

// loadIdentities reads, or creates, a seed per bus identity in dir and
// returns them with their grants for topo. persist lists the identities whose
// seeds are kept in files (and reused); the others get a new seed in memory
// every time (the services of `up`, which connect in-process).
func loadIdentities(dir string, topo bus.Topology, persist func(identity string) bool) (identityKeys, error) {
	k := identityKeys{seeds: map[string][]byte{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return k, fmt.Errorf("identities: %w", err)
	}
	for _, id := range bus.Identities() {
		var seed []byte
		path := filepath.Join(dir, id+".nk")
		if persist(id) {
			b, err := os.ReadFile(path)
			switch {
			case err == nil:
				seed = bytes.TrimSpace(b)
			case !errors.Is(err, os.ErrNotExist):
				return k, fmt.Errorf("identity %s: %w", id, err)
			}
		}
		if seed == nil {
			s, _, err := bus.NewIdentityKey()
			if err != nil {
				return k, err
			}
			seed = s
			if persist(id) {
				if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
					return k, fmt.Errorf("identity %s: %w", id, err)
				}
			}
		}
		u, err := bus.UserFor(id, seed, topo)
		if err != nil {
			return k, fmt.Errorf("%s: %w", path, err)
		}
		k.seeds[id] = seed
		k.users = append(k.users, u)
	}
	return k, nil
}

// cmdAuth is `the-loop auth init DIR`: the bus identities of a deployment.
// It writes one NKey seed per identity (DIR/nats/<identity>.nk, the secrets,
// one to each service) and DIR/auth.conf, the nats-server authorization
// block with their public keys and permissions, for nats.conf to include.
// Seeds already there are kept unless --force, so running it again only
// rewrites auth.conf and signers.json (docs/decisions/105-auth-init-keeps-identities-and-lets-the-services-read-them.md);
// and each seed is made readable by the services' uid (--reader).
func cmdAuth(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	const usage = "auth init DIR [--force] [--reader UID|none] | auth signers [FILE]"
	if len(args) > 0 && args[0] == "signers" {
		return cmdAuthSigners(ctx, args[1:], env, stdout, stderr)
	}
	if len(args) == 0 || args[0] != "init" {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	fs := newFlags("auth init", stderr)
	force := fs.Bool("force", false, "replace the identities already in DIR with new ones (then reload NATS and provision again)")
	readerFlag := fs.String("reader", strconv.Itoa(servicesUID), "the uid granted read on the seeds, the services' containers' (deploy/); none grants nothing")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	reader, grant, err := parseReader(*readerFlag)
	if err != nil {
		return err
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	dir := pos[0]
	seedDir := filepath.Join(dir, identitiesDir)
	existing := existingIdentities(seedDir)
	if *force {
		for _, id := range existing {
			if err := os.Remove(filepath.Join(seedDir, id+".nk")); err != nil {
				return fmt.Errorf("auth init --force: %w", err)
			}
		}
	}
	keys, err := loadIdentities(seedDir, topologyOf(s), func(string) bool { return true })
	if err != nil {
		return err
	}
	comments := map[string]string{}
	for i, id := range bus.Identities() {
		comments[keys.users[i].Public] = id
	}
	conf := filepath.Join(dir, "auth.conf")
	if err := os.WriteFile(conf, []byte(bus.AuthorizationConf(keys.users, comments)), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", conf, err)
	}
	fmt.Fprintf(stdout, "wrote %s (public keys and permissions: include it in nats.conf)\n", conf)
	signers := filepath.Join(dir, signersFile)
	if err := os.WriteFile(signers, bus.SignersFile(keys.publicKeys()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", signers, err)
	}
	fmt.Fprintf(stdout, "wrote %s (public keys the events are signed with, nothing secret: 'the-loop auth signers' writes them to the bus as the operator)\n", signers)
	var ungranted error
	how := ""
	for _, id := range bus.Identities() {
		path := filepath.Join(seedDir, id+".nk")
		state := "new"
		switch {
		case slices.Contains(existing, id) && *force:
			state = "replaced"
		case slices.Contains(existing, id):
			state = "kept"
		}
		if grant && ungranted == nil {
			h, err := grantRead(path, reader)
			if err != nil {
				ungranted = err
			}
			how = h
		}
		fmt.Fprintf(stdout, "  %-15s %s (%s)\n", id, path, state)
	}
	switch {
	case len(existing) > 0 && !*force:
		fmt.Fprintf(stdout, "%s already held %d identities: kept, and auth.conf and signers.json written from them. "+
			"auth init never replaces an identity without --force, which issues new ones (then reload NATS and provision again)\n", seedDir, len(existing))
	case len(existing) > 0:
		fmt.Fprintf(stdout, "replaced %d identities: reload NATS (auth.conf), provision again (signers.json) and give each service its new seed\n", len(existing))
	}
	if grant && ungranted == nil {
		fmt.Fprintf(stdout, "each seed is readable by uid %d, the services' containers' (%s; --reader)\n", reader, how)
	}
	fmt.Fprintf(stdout, "give each service its own seed as LOOP_NATS_NKEY_FILE (a secret); the operator verbs use operator.nk or observer.nk\n")
	if ungranted != nil {
		// Not a failure: the identities are issued, and where no
		// container reads them (local processes; Docker Desktop's file
		// sharing) nothing is missing. Said once, with what to run.
		fmt.Fprintf(stderr, "the-loop: auth init: uid %d cannot read the seeds (%v); compose's containers run as that uid: "+
			"run 'sudo the-loop auth init %s' (it keeps the seeds) or 'sudo chown %d %s/*.nk' (--reader none: no container reads them)\n",
			reader, ungranted, dir, reader, seedDir)
	}
	return nil
}

// existingIdentities are the identities whose seed file is in dir.
func existingIdentities(dir string) []string {
	var out []string
	for _, id := range bus.Identities() {
		if _, err := os.Stat(filepath.Join(dir, id+".nk")); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// signersFile is the public signers file `auth init` writes beside auth.conf.
const signersFile = "signers.json"

// publicKeys are the identities' public keys, by identity.
func (k identityKeys) publicKeys() map[string]string {
	out := make(map[string]string, len(k.users))
	for i, id := range bus.Identities() {
		out[id] = k.users[i].Public
	}
	return out
}

// cmdAuthSigners is `the-loop auth signers [FILE]`: the operator's
// provisioning of the signers bucket from the public signers file `auth
// init` wrote (FILE, else LOOP_SIGNERS_FILE). The services check every
// event's signature against it (docs/decisions/099-signed-events.md) and
// wait for it at start. Run it as the operator, after `auth init` and
// whenever a seed changes.
func cmdAuthSigners(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("auth signers", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	path := s.Common.SignersFile
	if fs.NArg() == 1 {
		path = fs.Arg(0)
	}
	if path == "" || fs.NArg() > 1 {
		return fmt.Errorf("%w: auth signers FILE (or LOOP_SIGNERS_FILE): the signers file 'the-loop auth init' wrote", errUsage)
	}
	pubs, err := bus.ReadSignersFile(path)
	if err != nil {
		return err
	}
	conn, err := cliConnect(ctx, env, "auth-signers", write)
	if err != nil {
		return err
	}
	defer conn.Close()
	topo := bus.DefaultTopology()
	topo.Partitions, topo.Replicas = s.Common.Partitions, s.Common.Replicas
	topo.Signers = pubs
	if err := provision(ctx, newLogger(stderr, s.Common.LogLevel, s.Common.LogFormat), conn, topo); err != nil {
		return fmt.Errorf("provision the signers: %w", err)
	}
	fmt.Fprintf(stdout, "the signers bucket holds the public keys of %d identities\n", len(pubs))
	return nil
}

// access is what an operator verb needs: to read, or to change something.
type access int

const (
	read access = iota
	write
)

// cliConnect connects an operator verb to LOOP_NATS_URL, or to the embedded
// server of a local `the-loop up` (LOOP_NATS_LISTEN), with the credential the
// environment gives. Against a local `up` with none given, a verb that only
// reads uses the observer identity `up` keeps in its store; a verb that
// changes something needs the operator's credential named explicitly, so
// that nothing running as this user picks up the power to act by accident.
func cliConnect(ctx context.Context, env config.Env, name string, need access) (*bus.Conn, error) {
	s, err := loadSettings(env)
	if err != nil {
		return nil, err
	}
	url := s.Common.NATSURL
	creds := natsCredentials(s.Common.NATS)
	identity := bus.IdentityObserver
	if need == write {
		identity = bus.IdentityOperator
	}
	if url == "" {
		url = "nats://" + s.Up.NATSListen
		if creds.Kind() == "none" {
			store, err := storeDir(s, env)
			if err != nil {
				return nil, err
			}
			file := filepath.Join(store, identitiesDir, identity+".nk")
			if need == write {
				return nil, fmt.Errorf("this verb changes the loop and needs the operator's credential: set LOOP_NATS_NKEY_FILE=%s (the local `the-loop up` keeps it there)", file)
			}
			creds = bus.Credentials{SeedFile: file, Setting: "the observer identity of `the-loop up` (" + file + ")"}
			if _, err := os.Stat(file); err != nil {
				return nil, fmt.Errorf("no local `the-loop up` store at %s (set LOOP_STORE_DIR, or LOOP_NATS_URL and a credential): %w", store, err)
			}
		}
	}
	conn, err := bus.Connect(ctx, bus.Options{URL: url, Name: name, Credentials: creds, Identity: identity, ReconnectWait: 100 * time.Millisecond})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", bus.RedactURL(url), err)
	}
	wctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	if err := conn.WaitConnected(wctx); err != nil {
		conn.Close()
		var ae *bus.AuthError
		if errors.As(err, &ae) {
			return nil, err
		}
		return nil, fmt.Errorf("NATS at %s is not reachable (is 'the-loop up' running?): %w", bus.RedactURL(url), err)
	}
	return conn, nil
}

// storeDir is LOOP_STORE_DIR or its default.
func storeDir(s settings, env config.Env) (string, error) {
	if s.Up.StoreDir != "" {
		return s.Up.StoreDir, nil
	}
	return config.DefaultStoreDir(env)
}

// within reports whether path is dir or inside it (both made absolute).
func within(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && (rel == "." || !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != "..")
}
