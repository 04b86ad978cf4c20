package netns

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
)

// Protocol is a transport protocol a responder answers and a prober speaks.
type Protocol string

// Protocols.
const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

func (p Protocol) valid() bool { return p == TCP || p == UDP || p == SCTP }

// replyMagic starts every reply (and UDP request) so stray traffic is told
// apart from a responder's answer.
const replyMagic = "KPSIM1"

// Reply is what a responder says about one connection or datagram.
type Reply struct {
	Protocol Protocol
	// Endpoint is the local address and port that received the packet,
	// i.e. the endpoint after DNAT.
	Endpoint netip.AddrPort
	// Source is the peer address and port the pod saw (after any SNAT).
	Source netip.AddrPort
	// Nonce echoes the UDP request's nonce; empty for stream protocols.
	Nonce string
}

// String formats the reply as sent on the wire: one line,
// "KPSIM1 <proto> <endpoint> <source> [<nonce>]\n".
func (r Reply) String() string {
	if r.Nonce != "" {
		return fmt.Sprintf("%s %s %s %s %s\n", replyMagic, r.Protocol, r.Endpoint, r.Source, r.Nonce)
	}
	return fmt.Sprintf("%s %s %s %s\n", replyMagic, r.Protocol, r.Endpoint, r.Source)
}

// appendReply is String without allocations beyond b's growth (responders
// answer tens of thousands of times a second).
func appendReply(b []byte, r Reply) []byte {
	b = append(b, replyMagic...)
	b = append(b, ' ')
	b = append(b, r.Protocol...)
	b = append(b, ' ')
	b = r.Endpoint.AppendTo(b)
	b = append(b, ' ')
	b = r.Source.AppendTo(b)
	if r.Nonce != "" {
		b = append(b, ' ')
		b = append(b, r.Nonce...)
	}
	return append(b, '\n')
}

// ParseReply parses one responder reply. It is strict: anything else than
// a well-formed reply is an error, so a prober counts it as a bad reply.
func ParseReply(b []byte) (Reply, error) {
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok {
		return Reply{}, fmt.Errorf("reply %q: not terminated by a newline", truncate(b))
	}
	f := strings.Fields(string(line))
	if len(f) < 4 || len(f) > 5 || f[0] != replyMagic {
		return Reply{}, fmt.Errorf("reply %q: want %q <proto> <endpoint> <source> [nonce]", truncate(b), replyMagic)
	}
	r := Reply{Protocol: Protocol(f[1])}
	if !r.Protocol.valid() {
		return Reply{}, fmt.Errorf("reply %q: unknown protocol %q", truncate(b), f[1])
	}
	var err error
	if r.Endpoint, err = netip.ParseAddrPort(f[2]); err != nil {
		return Reply{}, fmt.Errorf("reply %q: endpoint: %w", truncate(b), err)
	}
	if r.Source, err = netip.ParseAddrPort(f[3]); err != nil {
		return Reply{}, fmt.Errorf("reply %q: source: %w", truncate(b), err)
	}
	if len(f) == 5 {
		r.Nonce = f[4]
	}
	return r, nil
}

// udpRequest is what a UDP prober sends: the magic and a nonce the reply
// must echo.
func appendUDPRequest(b []byte, nonce string) []byte {
	b = append(b, replyMagic...)
	b = append(b, "? "...)
	b = append(b, nonce...)
	return append(b, '\n')
}

// parseUDPRequest returns the nonce of a prober's UDP request.
func parseUDPRequest(b []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(replyMagic+"? "))
	if !ok {
		return "", false
	}
	rest, ok = bytes.CutSuffix(rest, []byte("\n"))
	if !ok || len(rest) == 0 || len(rest) > 32 || bytes.ContainsAny(rest, " \n") {
		return "", false
	}
	return string(rest), true
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
