package kubenode

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image is a container image assembled from files of this machine, without a daemon or a
// registry: what a Dockerfile's COPY steps would produce, in one layer.
type Image struct {
	// Ref is the image's name as pods and containerd know it (e.g. "registry.k8s.io/pause:3.10.2").
	Ref string
	// Files maps a path in the image to the file on this machine that fills it.
	Files map[string]string
	// Dirs are directories created in the image, with their modes (e.g. "/tmp": 01777).
	Dirs map[string]os.FileMode
	// Contents maps a path in the image to literal content (e.g. /etc/passwd), mode 0644.
	Contents map[string]string
	// Entrypoint, Env and User go into the image's config.
	Entrypoint []string
	Env        []string
	User       string
}

// defaultPath is the PATH distroless and most base images set.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// build returns the image: one layer with Dirs, Files and Contents, and a linux/amd64 config.
func (im Image) build() (v1.Image, error) {
	layerTar, err := im.layer()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", im.Ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", im.Ref, err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: "gpudra node tier"}})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", im.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", im.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = im.Entrypoint
	cf.Config.Env = append([]string{defaultPath}, im.Env...)
	cf.Config.User = im.User
	return mutate.ConfigFile(img, cf)
}

// layer writes the layer's tar: parent directories first, then every entry in path order.
func (im Image) layer() ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		from string
		data string
	}
	entries := map[string]entry{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755}}
			}
		}
	}
	for p, mode := range im.Dirs {
		addParents(p)
		m := int64(mode.Perm())
		if mode&os.ModeSticky != 0 {
			m |= 0o1000
		}
		entries[p] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: p[1:] + "/", Mode: m}}
	}
	for p, from := range im.Files {
		st, err := os.Stat(from)
		if err != nil {
			return nil, err
		}
		addParents(p)
		entries[p] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: int64(st.Mode().Perm()), Size: st.Size()}, from: from}
	}
	for p, data := range im.Contents {
		addParents(p)
		entries[p] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: 0o644, Size: int64(len(data))}, data: data}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := entries[p]
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		switch {
		case e.from != "":
			f, err := os.Open(e.from)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(tw, f)
			_ = f.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.from, err)
			}
		case e.data != "":
			if _, err := io.WriteString(tw, e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteArchive writes images into one docker-archive tarball at file, each tagged with its Ref,
// as `docker save` would; `ctr images import` reads it.
func WriteArchive(file string, images ...Image) error {
	refs := map[name.Tag]v1.Image{}
	for _, im := range images {
		tag, err := name.NewTag(im.Ref)
		if err != nil {
			return fmt.Errorf("image name %q: %w", im.Ref, err)
		}
		img, err := im.build()
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	if err := tarball.MultiWriteToFile(file, refs); err != nil {
		return fmt.Errorf("write image archive %s: %w", file, err)
	}
	return nil
}

// StaticImage is an image holding one statically linked program at /bin/<name> as its
// entrypoint: the pause image and the workload image.
func StaticImage(ref, binary string) Image {
	p := "/bin/" + filepath.Base(binary)
	return Image{Ref: ref, Files: map[string]string{p: binary}, Entrypoint: []string{p}}
}

// DistrolessUser is the non-root user distroless images declare (the driver's Dockerfile runs
// as it).
const DistrolessUser = "65532:65532"

// DriverImage is the reference driver's image as the repository's Dockerfile builds it: the
// GPU driver binary at /usr/bin/gpu-dra-driver (the entrypoint) and the ComputeDomain driver
// binary cdBinary at /usr/bin/compute-domain-driver, on a glibc base (distroless
// base-debian12, that is Debian bookworm's libc6, which is what this machine runs), non-root
// user 65532. The base is assembled from this machine's files: the shared libraries the two
// binaries need (ldd), the passwd and group entries distroless has, and a world-writable /tmp.
func DriverImage(ref, binary, cdBinary string) (Image, error) {
	im := Image{
		Ref:   ref,
		Files: map[string]string{"/usr/bin/gpu-dra-driver": binary, "/usr/bin/compute-domain-driver": cdBinary},
		Dirs:  map[string]os.FileMode{"/tmp": os.ModeSticky | 0o777, "/home/nonroot": 0o700},
		Contents: map[string]string{
			"/etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
			"/etc/group":  "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
		},
		Entrypoint: []string{"/usr/bin/gpu-dra-driver"},
		User:       DistrolessUser,
	}
	for _, b := range []string{binary, cdBinary} {
		libs, err := sharedLibraries(b)
		if err != nil {
			return Image{}, err
		}
		for inImage, host := range libs {
			im.Files[inImage] = host
		}
	}
	return im, nil
}

// lddLine matches "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader's
// "/lib64/ld-linux-x86-64.so.2 (0x...)".
var lddLine = regexp.MustCompile(`^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)`)

// sharedLibraries maps each shared library binary loads (as ldd reports it) to the real file
// behind it on this machine, under the path the loader asks for.
func sharedLibraries(binary string) (map[string]string, error) {
	out, err := exec.Command("ldd", binary).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return map[string]string{}, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", binary, err, out)
	}
	libs := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		m := lddLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		real, err := filepath.EvalSymlinks(m[1])
		if err != nil {
			return nil, fmt.Errorf("library %s of %s: %w", m[1], binary, err)
		}
		libs[m[1]] = real
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s: no libraries in %q", binary, out)
	}
	return libs, nil
}
