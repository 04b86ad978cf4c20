package vm

import "github.com/kpsim/kpsim/netns"

// vmInitScript is the guest's /init (busybox sh, PID 1). It prepares the
// VM, runs the node exactly as StartNode does on a host (the same binary,
// environment and fds 3 and 4, in a new network and mount namespace made by
// unshare, so the node's isolation checks pass unchanged), then writes a
// tar of /out to the output disk and powers off. Lines starting with
// "kpsim-vm: " on the console are markers the host timestamps.
//
// The run's files come from the appended per-run cpio in /kpsim/run:
// env (node name and run id), spec.json (the node spec with the namespace
// inodes left as placeholders: only the guest knows its own) and input
// (what Node.Send buffered).
const vmInitScript = `#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export LD_LIBRARY_PATH=` + guestLibPath + `
export HOME=/
mark() { echo "kpsim-vm: $*"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
exec </dev/console >/dev/console 2>&1
mark init "$(cut -d' ' -f1 /proc/uptime)"
while read -r mod args; do
	[ -n "$mod" ] || continue
	insmod "$mod" $args || mark "insmod-failed ${mod##*/}"
done <` + guestModList + `
ip link set lo up
mark modules "$(cut -d' ' -f1 /proc/uptime)"
if [ -r ` + guestRunDir + `/env ]; then
	. ` + guestRunDir + `/env
	ino() { l=$(readlink "$1"); l=${l#*[}; echo "${l%]}"; }
	spec=$(sed -e "s/@KPSIM_HOST_NETNS@/$(ino /proc/self/ns/net)/" -e "s/@KPSIM_HOST_MNTNS@/$(ino /proc/self/ns/mnt)/" ` + guestRunDir + `/spec.json)
	mkfifo /tmp/stderr.fifo
	tee /out/stderr </tmp/stderr.fifo &
	tee=$!
	mark node-start "$(cut -d' ' -f1 /proc/uptime)"
	` + netns.ConsoleEventsEnv + `=1 ` + netns.EnvNodeName + `="$KPSIM_NODE_NAME" ` + netns.EnvNodeConfig + `="$spec" unshare -n -m ` + guestKpsim + ` ` + netns.NodeArgv0 + ` "$KPSIM_NODE_NAME" "$KPSIM_RUN_ID" 1 \
		3<` + guestRunDir + `/input 4>/out/output.jsonl >/out/stdout 2>/tmp/stderr.fifo
	rc=$?
	wait $tee
	echo $rc >/out/exit
	mark node-exit "$rc $(cut -d' ' -f1 /proc/uptime)"
else
	echo probe >/out/exit
	mark probe-ok
fi
if [ -b /dev/vda ]; then
	tar -cf /dev/vda -C /out . && sync && mark output-written
else
	mark no-output-disk
fi
poweroff -f
`
