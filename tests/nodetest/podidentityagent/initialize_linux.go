//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// agentLinkName is the real agent's link.
const agentLinkName = "pod-id-link0"

// initialize sets up the host network namespace as the real agent's
// initialize does: the link pod-id-link0 (a dummy link), with
// 169.254.170.23/32 (required) and fd00:ec2::23/128 (optional: IPv6 may
// be off) on it, the link up, and a route to each address over the link in
// the main table. Each step is skipped when already done, so that it
// runs again on every start of the pod.
//
// A kernel without dummy links (the type is a module some test machines
// lack) gets the addresses on lo instead: pods reach the agent either way,
// since the node delivers a packet for any of its own addresses locally,
// whatever link holds it.
func initialize() error {
	nl, err := dialNetlink()
	if err != nil {
		return err
	}
	defer nl.close()
	link, err := agentLink(nl)
	if err != nil {
		return fmt.Errorf("cannot setup link: %w", err)
	}
	families := []struct {
		prefix   netip.Prefix
		optional bool
	}{
		{netip.MustParsePrefix(agentIPv4 + "/32"), false},
		{netip.MustParsePrefix(agentIPv6 + "/128"), true},
	}
	ok := make([]bool, len(families))
	for i, f := range families {
		err := addAddress(nl, link, f.prefix)
		switch {
		case err == nil:
			ok[i] = true
		case f.optional:
			logger.Error("Unable to configure optional family", "ip", f.prefix, "link", link.Name, "error", err)
		default:
			return fmt.Errorf("unable to configure required family %s on %s: %w", f.prefix, link.Name, err)
		}
	}
	logger.Info("Bringing up link: "+link.Name, "link", link.Name)
	if err := nl.setUp(link.Index); err != nil {
		return fmt.Errorf("error bringing up link %s: %w", link.Name, err)
	}
	for i, f := range families {
		if !ok[i] {
			continue
		}
		if err := addRoute(nl, link, f.prefix); err != nil {
			if f.optional {
				logger.Error("Unable to configure optional family", "ip", f.prefix, "link", link.Name, "error", err)
				continue
			}
			return err
		}
	}
	return nil
}

// agentLink is pod-id-link0, made when missing; lo when the kernel has no
// dummy links.
func agentLink(nl *netlinkConn) (*net.Interface, error) {
	if l, err := net.InterfaceByName(agentLinkName); err == nil {
		return l, nil
	}
	logger.Info("Link was not found, creating it", "link", agentLinkName)
	err := nl.addDummy(agentLinkName)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		logger.Warn("this kernel has no dummy links; the agent's addresses go on lo", "link", agentLinkName, "error", err)
		return net.InterfaceByName("lo")
	case err != nil && !errors.Is(err, unix.EEXIST):
		return nil, fmt.Errorf("unable to create interface %s: %w", agentLinkName, err)
	}
	return net.InterfaceByName(agentLinkName)
}

// addAddress puts prefix on the link unless an address of the link
// already covers it.
func addAddress(nl *netlinkConn, link *net.Interface, prefix netip.Prefix) error {
	addrs, err := link.Addrs()
	if err != nil {
		return fmt.Errorf("unable to read address list: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.Contains(prefix.Addr().AsSlice()) {
			logger.Info(fmt.Sprintf("Found IP %s on interface %s, continuing", prefix, link.Name))
			return nil
		}
	}
	logger.Info(fmt.Sprintf("Adding IP %s to %s as it was not found on interface", prefix, link.Name))
	return nl.addAddr(link.Index, prefix)
}

// addRoute adds a main-table route to prefix over the link unless one is
// there; one over another link is an error, as for the real agent.
func addRoute(nl *netlinkConn, link *net.Interface, prefix netip.Prefix) error {
	routes, err := nl.mainRoutes(family(prefix))
	if err != nil {
		return fmt.Errorf("unable to fetch route list for interface %s: %w", link.Name, err)
	}
	for _, r := range routes {
		if r.dst != prefix {
			continue
		}
		if r.oif != link.Index {
			return fmt.Errorf("expected route %s to be interface index %d but is %d, please remove route and try again",
				prefix, link.Index, r.oif)
		}
		logger.Info(fmt.Sprintf("Route (dst: %v, iface idx: %v) already exists, skipping creation", prefix, r.oif))
		return nil
	}
	if err := nl.addRoute(link.Index, prefix); err != nil {
		return fmt.Errorf("unable to create route for addr %v: %w", prefix, err)
	}
	logger.Info(fmt.Sprintf("Created newRoute (dst: %v, iface idx: %v)", prefix, link.Index))
	return nil
}

// prefixBits is a prefix's length (0 to 128).
func prefixBits(p netip.Prefix) uint8 { return uint8(p.Bits()) } //nolint:gosec // G115: at most 128

func family(p netip.Prefix) uint8 {
	if p.Addr().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// netlinkConn is a NETLINK_ROUTE socket: requests with an acknowledgement
// or a dump, one at a time.
type netlinkConn struct {
	fd  int
	seq uint32
}

func dialNetlink() (*netlinkConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	return &netlinkConn{fd: fd}, nil
}

func (c *netlinkConn) close() { _ = unix.Close(c.fd) }

// request sends one message and returns the payloads answered (for a dump)
// once the kernel says it is done or acknowledges it; a negative
// acknowledgement is its errno.
func (c *netlinkConn) request(typ uint16, flags uint16, payload []byte) ([][]byte, error) {
	c.seq++
	if len(payload) > 1<<16 {
		return nil, errors.New("netlink: message too long")
	}
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(payload))
	ne.PutUint32(msg[0:], uint32(unix.NLMSG_HDRLEN+len(payload))) //nolint:gosec // G115: at most 64 KiB, checked above
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], c.seq)
	msg = append(msg, payload...)
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	var out [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l, typ, seq := int(ne.Uint32(b[0:])), ne.Uint16(b[4:]), ne.Uint32(b[8:])
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return nil, errors.New("netlink: malformed message")
			}
			body := b[unix.NLMSG_HDRLEN:l]
			b = b[min(nlmAlign(l), len(b)):]
			if seq != c.seq {
				continue
			}
			switch typ {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(body) < 4 {
					return nil, errors.New("netlink: short error message")
				}
				// A negated errno, 0 for an acknowledgement.
				if errno := -int64(int32(ne.Uint32(body))); errno != 0 { //nolint:gosec // G115: the kernel's int32, as it is
					return nil, unix.Errno(uintptr(errno)) //nolint:gosec // G115: an errno, small and positive
				}
				return out, nil
			default:
				// buf is read into again: keep a copy.
				out = append(out, slices.Clone(body))
			}
		}
	}
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
func rtaAlign(n int) int { return (n + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1) }

// ne is the byte order of netlink messages: the host's.
var ne = binary.NativeEndian

// attr encodes one route attribute (its data is at most a link name or an
// address, far below the 64 KiB its length field holds).
func attr(typ uint16, data []byte) []byte {
	b := make([]byte, rtaAlign(unix.SizeofRtAttr+len(data)))
	ne.PutUint16(b[0:], uint16(unix.SizeofRtAttr+len(data))) //nolint:gosec // G115: short, see above
	ne.PutUint16(b[2:], typ)
	copy(b[unix.SizeofRtAttr:], data)
	return b
}

// attrs decodes route attributes.
func attrs(b []byte) map[uint16][]byte {
	m := map[uint16][]byte{}
	for len(b) >= unix.SizeofRtAttr {
		l := int(ne.Uint16(b[0:]))
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		m[ne.Uint16(b[2:])&^unix.NLA_F_NESTED] = b[unix.SizeofRtAttr:l]
		b = b[min(rtaAlign(l), len(b)):]
	}
	return m
}

// ifInfomsg encodes struct ifinfomsg: family, type, index, flags, change.
func ifInfomsg(index, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = unix.AF_UNSPEC
	ne.PutUint32(b[4:], index)
	ne.PutUint32(b[8:], flags)
	ne.PutUint32(b[12:], change)
	return b
}

// ifAddrmsg encodes struct ifaddrmsg: family, prefix length, flags, scope,
// index.
func ifAddrmsg(fam, prefixLen, scope uint8, index uint32) []byte {
	return ne.AppendUint32([]byte{fam, prefixLen, 0, scope}, index)
}

// rtMsg encodes struct rtmsg: family, destination and source lengths,
// tos, table, protocol, scope, type and flags (0).
func rtMsg(fam, dstLen, table, protocol, scope, typ uint8) []byte {
	return []byte{fam, dstLen, 0, 0, table, protocol, scope, typ, 0, 0, 0, 0}
}

// linkIndex is a link's index as netlink carries it.
func linkIndex(index int) (uint32, error) {
	if index <= 0 || index > math.MaxInt32 {
		return 0, fmt.Errorf("netlink: link index %d", index)
	}
	return uint32(index), nil
}

const ackCreate = unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL

// addDummy creates a dummy link (ip link add NAME type dummy).
func (c *netlinkConn) addDummy(name string) error {
	p := ifInfomsg(0, 0, 0)
	p = append(p, attr(unix.IFLA_IFNAME, append([]byte(name), 0))...)
	p = append(p, attr(unix.IFLA_LINKINFO|unix.NLA_F_NESTED, attr(unix.IFLA_INFO_KIND, []byte("dummy")))...)
	_, err := c.request(unix.RTM_NEWLINK, ackCreate, p)
	return err
}

// setUp sets the link up (ip link set up).
func (c *netlinkConn) setUp(index int) error {
	i, err := linkIndex(index)
	if err != nil {
		return err
	}
	_, err = c.request(unix.RTM_NEWLINK, unix.NLM_F_ACK, ifInfomsg(i, unix.IFF_UP, unix.IFF_UP))
	return err
}

// addAddr adds an address of global scope (ip addr add PREFIX dev LINK).
func (c *netlinkConn) addAddr(index int, prefix netip.Prefix) error {
	i, err := linkIndex(index)
	if err != nil {
		return err
	}
	ip := prefix.Addr().AsSlice()
	p := ifAddrmsg(family(prefix), prefixBits(prefix), unix.RT_SCOPE_UNIVERSE, i)
	if prefix.Addr().Is4() {
		p = append(p, attr(unix.IFA_LOCAL, ip)...)
	}
	p = append(p, attr(unix.IFA_ADDRESS, ip)...)
	_, err = c.request(unix.RTM_NEWADDR, ackCreate, p)
	return err
}

// route is a main-table route's destination and output link.
type route struct {
	dst netip.Prefix
	oif int
}

// mainRoutes lists the main table's routes of a family (ip route show).
func (c *netlinkConn) mainRoutes(fam uint8) ([]route, error) {
	msgs, err := c.request(unix.RTM_GETROUTE, unix.NLM_F_DUMP, rtMsg(fam, 0, 0, 0, 0, 0))
	if err != nil {
		return nil, err
	}
	var out []route
	for _, m := range msgs {
		if len(m) < unix.SizeofRtMsg {
			continue
		}
		dstLen, table8 := m[1], m[4]
		a := attrs(m[unix.SizeofRtMsg:])
		table := uint32(table8)
		if t, ok := a[unix.RTA_TABLE]; ok && len(t) == 4 {
			table = ne.Uint32(t)
		}
		if table != unix.RT_TABLE_MAIN {
			continue
		}
		dst, ok := netip.AddrFromSlice(a[unix.RTA_DST])
		if !ok {
			continue // the default route
		}
		r := route{dst: netip.PrefixFrom(dst.Unmap(), int(dstLen))}
		if o, ok := a[unix.RTA_OIF]; ok && len(o) == 4 {
			r.oif = int(ne.Uint32(o))
		}
		out = append(out, r)
	}
	return out, nil
}

// addRoute adds a main-table route to prefix over the link (ip route add
// PREFIX dev LINK).
func (c *netlinkConn) addRoute(index int, prefix netip.Prefix) error {
	i, err := linkIndex(index)
	if err != nil {
		return err
	}
	oif := ne.AppendUint32(nil, i)
	p := rtMsg(family(prefix), prefixBits(prefix), unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST)
	p = append(p, attr(unix.RTA_DST, prefix.Addr().AsSlice())...)
	p = append(p, attr(unix.RTA_OIF, oif)...)
	_, err = c.request(unix.RTM_NEWROUTE, ackCreate, p)
	return err
}
