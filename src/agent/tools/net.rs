//! Which network addresses the web tools may reach: public unicast only. Loopback,
//! private, link-local (cloud metadata at 169.254.169.254), carrier-grade NAT, multicast,
//! unspecified and the IPv6 equivalents are refused; for IPv6 only global unicast
//! (2000::/3) passes, and forms that embed an IPv4 address (mapped, NAT64, 6to4) are
//! judged by that address.

use std::net::{IpAddr, Ipv4Addr};

/// Whether `ip` is a public address a fetch may connect to.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            let v4_at = |i: usize| {
                Ipv4Addr::new(
                    (s[i] >> 8) as u8,
                    s[i] as u8,
                    (s[i + 1] >> 8) as u8,
                    s[i + 1] as u8,
                )
            };
            // NAT64 (64:ff9b::/96) embeds an IPv4 address.
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) {
                return is_public_v4(v4_at(6));
            }
            // Otherwise only global unicast (2000::/3): this leaves out loopback, `::`,
            // IPv4-compatible and IPv4-translated forms, unique local (fc00::/7),
            // link-local, site-local, multicast, discard-only and local-use NAT64.
            (s[0] & 0xe000) == 0x2000
                && !(s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                && !(s[0] == 0x3fff && s[1] < 0x1000) // documentation (3fff::/20)
                && (s[0] != 0x2002 || is_public_v4(v4_at(1))) // 6to4 embeds an IPv4 address
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (64..128).contains(&o[1])) // carrier-grade NAT
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (18..20).contains(&o[1])) // benchmarking
        || o[0] >= 240)
}

#[cfg(test)]
mod tests {
    use super::is_public;

    #[test]
    fn private_and_special_addresses_are_refused() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
            "64:ff9b:1::7f00:1",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
            "100::1",
            "2001:db8::1",
            "3fff::1",
            "ff02::1",
        ] {
            assert!(!is_public(a.parse().unwrap()), "{a} should be refused");
        }
        for a in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2a00:1450:4001:80b::200e",
        ] {
            assert!(is_public(a.parse().unwrap()), "{a} should be allowed");
        }
    }
}
