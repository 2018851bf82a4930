//! The mirror read from apt sources, ldd's output, tags, the import's
//! changes, the sandbox user and the tar's ownership.

use super::mirror::{mirror_from, one_line_as_deb822};
use super::rootfs::{layout, pack, parse_ldd, sandbox_user};
use super::*;

#[test]
fn mirror_from_deb822_prefers_bookworm() {
    let text = "Types: deb\n# comment\nURIs: http://deb.debian.org/debian-security\n\
                Suites: bookworm-security\nComponents: main\n\n\
                Types: deb\nURIs: http://mirror.example/debian/\n\
                Suites: bookworm bookworm-updates\nComponents: main\n";
    assert_eq!(
        mirror_from(&[text.to_string()]).as_deref(),
        Some("http://mirror.example/debian")
    );
}

#[test]
fn mirror_from_one_line_sources() {
    let text = "# deb http://old.example/debian bookworm main\n\
                deb-src http://src.example/debian bookworm main\n\
                deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://m.example/debian bookworm main\n";
    assert_eq!(
        mirror_from(&[one_line_as_deb822(text)]).as_deref(),
        Some("http://m.example/debian")
    );
    // No bookworm: the first that is not a security archive.
    let text = "deb http://security.debian.org/debian-security trixie-security main\n\
                deb http://m.example/debian trixie main\n";
    assert_eq!(
        mirror_from(&[one_line_as_deb822(text)]).as_deref(),
        Some("http://m.example/debian")
    );
    assert_eq!(mirror_from(&[String::new()]), None);
}

#[test]
fn mirror_from_skips_disabled_and_foreign_sources() {
    let text = "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n\
                Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n\
                Types: deb\nURIs: cdrom:[Debian]/\nSuites: bookworm\n\n\
                Types: deb\nURIs: https://on.example/debian\nSuites: bookworm\n";
    assert_eq!(
        mirror_from(&[text.to_string()]).as_deref(),
        Some("https://on.example/debian")
    );
}

#[test]
fn ldd_output_parsed() {
    let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
    let paths = parse_ldd(text).unwrap();
    assert_eq!(
        paths,
        vec![
            PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
            PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
            PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
        ]
    );
    assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
}

#[test]
fn tags_checked() {
    for good in [
        "tandem-sandbox:1",
        "localhost/tandem-sandbox-test:1",
        "reg.example:5000/a/b:v1.2",
    ] {
        check_tag(good).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for bad in [
        "tandem-sandbox",
        "Tandem:1",
        ":1",
        "a:",
        "reg.example:5000/a",
        "a:b c",
    ] {
        assert!(check_tag(bad).is_err(), "{bad} was taken");
    }
}

#[test]
fn changes_set_user_workdir_proxy_and_cmd() {
    let changes = image_changes();
    for want in [
        "USER 1000:1000",
        "WORKDIR /workspace",
        "ENV HOME=/home/sandbox",
        "ENV HTTP_PROXY=http://127.0.0.1:3128",
        "ENV https_proxy=http://127.0.0.1:3128",
        "ENV NO_PROXY=localhost,127.0.0.1",
        "CMD [\"/usr/local/bin/tandem-shim\"]",
    ] {
        assert!(changes.iter().any(|c| c == want), "{want} missing");
    }
}

#[test]
fn user_added_once_and_uid_conflicts_refused() {
    let dir = tempfile::tempdir().unwrap();
    sandbox_user(dir.path(), "/bin/sh").unwrap();
    sandbox_user(dir.path(), "/bin/sh").unwrap();
    let passwd = fs::read_to_string(dir.path().join("etc/passwd")).unwrap();
    assert_eq!(passwd.matches("sandbox:x:1000:1000:").count(), 1);
    let group = fs::read_to_string(dir.path().join("etc/group")).unwrap();
    assert!(group.contains("\nsandbox:x:1000:\n"));

    let other = tempfile::tempdir().unwrap();
    fs::create_dir(other.path().join("etc")).unwrap();
    fs::write(
        other.path().join("etc/passwd"),
        "alice:x:1000:1000::/home/alice:/bin/sh",
    )
    .unwrap();
    assert!(sandbox_user(other.path(), "/bin/sh").is_err());
}

/// The tar holds everything as root but the home and /workspace, which
/// are 1000's, without any chown.
#[test]
fn pack_sets_ownership_in_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = dir.path().join("rootfs");
    fs::create_dir(&rootfs).unwrap();
    sandbox_user(&rootfs, "/bin/sh").unwrap();
    layout(&rootfs).unwrap();
    fs::write(rootfs.join("home/sandbox/.profile"), "").unwrap();
    let tar = dir.path().join("rootfs.tar");
    pack(&rootfs, &tar, Base::Busybox).unwrap();
    let out = Command::new("tar")
        .args(["--numeric-owner", "-tvf"])
        .arg(&tar)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    let owner_of = |name: &str| {
        let line = listing
            .lines()
            .find(|l| l.trim_end().trim_end_matches('/').ends_with(name))
            .unwrap_or_else(|| panic!("{name} not in\n{listing}"));
        line.split_whitespace().nth(1).unwrap().to_string()
    };
    assert_eq!(owner_of(" ./etc/passwd"), "0/0");
    assert_eq!(owner_of(" ./tmp"), "0/0");
    assert_eq!(owner_of(" ./home"), "0/0");
    assert_eq!(owner_of(" ./home/sandbox"), "1000/1000");
    assert_eq!(owner_of(" ./home/sandbox/.profile"), "1000/1000");
    assert_eq!(owner_of(" ./workspace"), "1000/1000");
    assert_eq!(listing.matches("./workspace/").count(), 1, "{listing}");
    assert!(
        listing.contains("drwxrwxrwt"),
        "/tmp is not 1777:\n{listing}"
    );
}
