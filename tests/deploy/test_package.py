"""The Debian package in a fresh Debian root (issue 20, item 5); CTest label `package`, run by
`make test-package` and .ci/run, skipped by `make test` (it downloads packages: a few minutes).

It builds the package from the current build (deploy/build-deb.sh), makes a Debian root with
`debootstrap --variant=minbase` in the build tree (from the apt mirror this machine's own apt
configuration uses; the bare root is cached as a tarball in the build tree for the next run),
installs the package there with apt-get (which resolves its declared dependencies from the
mirror), then checks inside it: `searchgate --version`; the searchgate system user and the demo
index its postinst built; `--check` of the shipped /etc/searchgate/searchgate.json as that user;
the installed gateway serving /retrieve on loopback with READY=1 on a NOTIFY_SOCKET, and reloading
its config when the unit's own ExecReload command runs (RELOADING=1, then READY=1); the unit
passing `systemd-analyze verify`; and a purge removing it all.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import sgtest
from sgtest import free_port, request

WORK = os.path.join(sgtest.BUILD_DIR, "pkgtest")
BASE_TAR = os.path.join(WORK, "cache", "debian-minbase.tar")
APT_CACHE = os.path.join(WORK, "cache", "apt-archives")


def sh(cmd, timeout=600, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return p


def codename():
    with open("/etc/os-release") as f:
        m = re.search(r"^VERSION_CODENAME=(\S+)$", f.read(), re.M)
    return m.group(1).strip('"')


def mirror(suite):
    """The URL of the archive this machine's apt takes `suite`/main from (its own configuration)."""
    out = sh(["apt-cache", "policy"]).stdout
    m = re.search(r"^\s*\d+\s+(\S+)\s+%s/main\s" % re.escape(suite), out, re.M)
    if not m:
        raise AssertionError("no %s/main source in this machine's apt configuration:\n%s" % (suite, out))
    return m.group(1)


def proxy_env():
    """The proxy apt uses here, if any, for debootstrap and the root's apt."""
    out = sh(["apt-config", "shell", "P", "Acquire::http::Proxy"]).stdout
    m = re.search(r"P='([^']*)'", out)
    return {"http_proxy": m.group(1)} if m and m.group(1) else {}


def cleanup_stale_roots():
    """Roots of an earlier run that was killed: their mounts first, then the files."""
    if not os.path.isdir(WORK):
        return
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for name in os.listdir(WORK):
        path = os.path.join(WORK, name)
        if not name.startswith(("root-", "debootstrap-")):
            continue
        for m in sorted((m for m in mounts if m.startswith(path + "/")), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        shutil.rmtree(path, ignore_errors=True)


class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (debootstrap, chroot, mount): run it as root, as CI does")
        for tool in ("debootstrap", "dpkg-deb", "dpkg-shlibdeps"):
            if shutil.which(tool) is None:
                raise AssertionError("%s is missing: .ci/deps.sh test installs it" % tool)
        os.makedirs(os.path.dirname(BASE_TAR), exist_ok=True)
        os.makedirs(APT_CACHE, exist_ok=True)
        cls.env = dict(os.environ, **proxy_env())
        cleanup_stale_roots()
        cls.suite = codename()
        cls.deb = sh([os.path.join(sgtest.SOURCE_DIR, "deploy", "build-deb.sh"), sgtest.BUILD_DIR, WORK]).stdout.strip()
        cls.root = tempfile.mkdtemp(prefix="root-", dir=WORK)
        cls.mounts = []
        try:
            cls.make_root()
            cls.install()
        except BaseException:
            cls.unmount()
            shutil.rmtree(cls.root, ignore_errors=True)
            raise

    @classmethod
    def make_root(cls):
        if not os.path.exists(BASE_TAR):
            base = tempfile.mkdtemp(prefix="debootstrap-", dir=WORK)
            try:
                sh(["debootstrap", "--variant=minbase", cls.suite, base, mirror(cls.suite)], timeout=900, env=cls.env)
                sh(["tar", "-C", base, "-cf", BASE_TAR + ".tmp", "."])
                os.rename(BASE_TAR + ".tmp", BASE_TAR)
            finally:
                shutil.rmtree(base, ignore_errors=True)
        sh(["tar", "-C", cls.root, "-xf", BASE_TAR])
        os.chmod(cls.root, 0o755)  # its "/" (the tarball's "." kept mkdtemp's 0700): the searchgate user must get in
        shutil.copy("/etc/resolv.conf", os.path.join(cls.root, "etc", "resolv.conf"))
        proxy = proxy_env().get("http_proxy")
        if proxy:
            with open(os.path.join(cls.root, "etc", "apt", "apt.conf.d", "90proxy"), "w") as f:
                f.write('Acquire::http::Proxy "%s";\n' % proxy)
        # /proc only (the gateway reads /proc/self/exe): debootstrap made the /dev nodes, and no host
        # folder is bind-mounted that a later `rm -rf build` could reach through a leftover mount
        target = os.path.join(cls.root, "proc")
        sh(["mount", "-t", "proc", "proc", target])
        cls.mounts.append(target)
        # downloaded packages are kept in the build tree for the next run
        archives = os.path.join(cls.root, "var", "cache", "apt", "archives")
        sh(["mount", "--bind", APT_CACHE, archives])
        cls.mounts.append(archives)
        os.makedirs(os.path.join(APT_CACHE, "partial"), exist_ok=True)

    @classmethod
    def install(cls):
        shutil.copy(cls.deb, os.path.join(cls.root, "tmp", "searchgate.deb"))
        cls.chroot(["apt-get", "update", "-qq"], timeout=600)
        # dict-gcide: the shipped config's demo corpus (a Recommends); systemd: systemd-analyze
        p = cls.chroot(["apt-get", "install", "-y", "-q", "--no-install-recommends", "/tmp/searchgate.deb", "dict-gcide",
                        "systemd"], timeout=900)
        cls.install_log = p.stdout

    @classmethod
    def chroot(cls, cmd, user=None, timeout=300, check=True, **kw):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
        env.update(kw.pop("env", {}))
        return sh(["chroot"] + cls.userspec(user) + [cls.root] + cmd, timeout=timeout, check=check, env=env, **kw)

    @classmethod
    def userspec(cls, user):
        """--userspec=UID:GID of a user of the root (numeric: the host does not know it)."""
        if user is None:
            return []
        pw = sh(["chroot", cls.root, "getent", "passwd", user]).stdout.split(":")
        return ["--userspec=%s:%s" % (pw[2], pw[3])]

    @classmethod
    def unmount(cls):
        for m in reversed(cls.mounts):
            subprocess.run(["umount", "-l", m], capture_output=True)
        cls.mounts = []

    @classmethod
    def tearDownClass(cls):
        cls.unmount()
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_1_version(self):
        out = self.chroot(["searchgate", "--version"]).stdout
        self.assertRegex(out, r"^searchgate \d+\.\d+\.\d+ \(git [0-9a-f]{7,}(-dirty)?\)\n")
        for line in (r"plugin ABI\s+\d+\.\d+", r"h2o\s+2\.2\.5", r"hiredis\s+0\.14", r"libcurl\s+\d+\.\d+", r"BLAS\s+OpenBLAS \d",
                     r"FAISS\s+\d+\.\d+", r"plugins\s+/usr/lib/searchgate: .*bm25"):
            self.assertRegex(out, re.compile("^" + line, re.M))
        for plugin in ("local", "serper", "qdrant", "upstream", "mock"):
            self.assertIn(plugin, out.splitlines()[-1].split())
        # the offline trace tool is in the package, and its libraries (libcurl, cJSON) are in Depends
        self.assertIn("usage: searchgate-trace summary", self.chroot(["searchgate-trace", "--help"]).stdout)

    def test_2_user_and_demo_index(self):
        pw = self.chroot(["getent", "passwd", "searchgate"]).stdout.split(":")
        self.assertEqual((pw[5], pw[6].strip()), ("/var/lib/searchgate", "/usr/sbin/nologin"))
        self.assertLess(int(pw[2]), 1000, "a system user")
        idx = os.path.join(self.root, "var", "lib", "searchgate", "demo", "bm25")
        self.assertTrue(os.path.isdir(idx), self.install_log[-3000:])
        self.assertEqual(os.stat(idx).st_uid, int(pw[2]))

    def test_3_check_shipped_config(self):
        p = self.chroot(["searchgate", "--check", "--config", "/etc/searchgate/searchgate.json"], user="searchgate")
        self.assertIn("config /etc/searchgate/searchgate.json is valid; 127.0.0.1:8000 is free; 1 backend(s) loaded", p.stdout)

    def test_4_installed_gateway_serves(self):
        """The installed binary, as the searchgate user, finds its plugins in /usr/lib/searchgate and serves."""
        run_dir = os.path.join(self.root, "run", "searchgate")
        os.makedirs(run_dir, exist_ok=True)
        pw = self.chroot(["getent", "passwd", "searchgate"]).stdout.split(":")
        os.chown(run_dir, int(pw[2]), int(pw[3]))
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as ns:
            ns.bind(os.path.join(run_dir, "notify"))
            os.chmod(os.path.join(run_dir, "notify"), 0o666)
            ns.settimeout(60)
            port = free_port()
            env = {"PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": "/run/searchgate/notify"}
            proc = subprocess.Popen([shutil.which("chroot") or "/usr/sbin/chroot"] + self.userspec("searchgate") + [self.root, "searchgate", "--config",
                                     "/etc/searchgate/searchgate.json", "--port", str(port), "--address-file",
                                     "/run/searchgate/address"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                ready = ns.recv(4096).decode().split("\n")
                self.assertIn("READY=1", ready)
                self.assertIn("MAINPID=%d" % proc.pid, ready)  # chroot exec()s the gateway: the same process
                with open(os.path.join(run_dir, "address")) as f:
                    self.assertEqual(f.read(), "127.0.0.1:%d" % port)
                r = request(port, "POST", "/retrieve", {"queries": ["what is a volcano"], "topk": 2, "return_scores": True})
                self.assertEqual(r.status, 200, r)
                self.assertEqual(len(r.json()["result"][0]), 2)
                self.assertEqual(request(port, "GET", "/health").status, 200)
                # `systemctl reload`: the unit's own ExecReload command, with $MAINPID as systemd fills it in
                with open(os.path.join(self.root, "lib", "systemd", "system", "searchgate.service")) as f:
                    exec_reload = re.search(r"^ExecReload=(.*)$", f.read(), re.M).group(1)
                self.chroot(exec_reload.replace("$MAINPID", str(proc.pid)).split())
                self.assertIn("RELOADING=1", ns.recv(4096).decode().split("\n"))
                done = ns.recv(4096).decode().split("\n")
                self.assertIn("READY=1", done)
                self.assertIn("STATUS=configuration reloaded: generation 2 serves new requests", done)
                r = request(port, "POST", "/retrieve", {"queries": ["what is a volcano"], "topk": 2})
                self.assertEqual(r.status, 200, r)
            finally:
                proc.send_signal(signal.SIGTERM)
                out = proc.communicate(timeout=60)[0].decode()
            self.assertEqual(proc.returncode, 0, out)
            self.assertFalse(os.path.exists(os.path.join(run_dir, "address")))

    def test_5_unit_verifies(self):
        p = self.chroot(["systemd-analyze", "verify", "/lib/systemd/system/searchgate.service"], check=False)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""))
        with open(os.path.join(self.root, "lib", "systemd", "system", "searchgate.service")) as f:
            unit = f.read()
        for line in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "NoNewPrivileges=yes", "ProtectSystem=strict",
                     "PrivateTmp=yes", "LimitNOFILE=", "User=searchgate"):
            self.assertIn(line, unit)
        # deb-systemd-helper enabled it (it starts where systemd runs: not in a chroot)
        self.assertTrue(os.path.islink(os.path.join(self.root, "etc", "systemd", "system", "multi-user.target.wants",
                                                    "searchgate.service")))

    def test_6_purge(self):
        self.chroot(["apt-get", "purge", "-y", "-q", "searchgate"])
        for path in ("usr/bin/searchgate", "usr/lib/searchgate", "etc/searchgate", "var/lib/searchgate",
                     "lib/systemd/system/searchgate.service", "etc/systemd/system/multi-user.target.wants/searchgate.service"):
            self.assertFalse(os.path.lexists(os.path.join(self.root, path)), path)


if __name__ == "__main__":
    sgtest.main()
