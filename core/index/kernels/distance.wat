;; Distance kernels over vectors that live in the shared memory of a VectorStore.
;; Every pointer is a byte offset into that memory; `n` is the padded dimension in floats (a multiple
;; of 4). "nip" is the negative inner product, so that lower is better for every kind.
;; Pointers are compared unsigned (memories up to 4 GiB); callers keep vectors at offset >= 64.
;; Four f32x4 accumulators hide the add latency; a tail loop handles the last 4..12 floats.
(module
  (import "env" "memory" (memory 1 65536 shared))

  (func $hsum (param $v v128) (result f32)
    (f32.add
      (f32.add (f32x4.extract_lane 0 (local.get $v)) (f32x4.extract_lane 1 (local.get $v)))
      (f32.add (f32x4.extract_lane 2 (local.get $v)) (f32x4.extract_lane 3 (local.get $v)))))

  (func $l2 (export "l2") (param $a i32) (param $b i32) (param $n i32) (result f32)
    (local $end i32) (local $end16 i32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128) (local $d v128)
    (local.set $end (i32.add (local.get $a) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end16 (i32.sub (local.get $end) (i32.const 64)))
    (block $done16
      (loop $loop16
        (br_if $done16 (i32.gt_u (local.get $a) (local.get $end16)))
        (local.set $d (f32x4.sub (v128.load (local.get $a)) (v128.load (local.get $b))))
        (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (local.get $d) (local.get $d))))
        (local.set $d (f32x4.sub (v128.load offset=16 (local.get $a)) (v128.load offset=16 (local.get $b))))
        (local.set $s1 (f32x4.add (local.get $s1) (f32x4.mul (local.get $d) (local.get $d))))
        (local.set $d (f32x4.sub (v128.load offset=32 (local.get $a)) (v128.load offset=32 (local.get $b))))
        (local.set $s2 (f32x4.add (local.get $s2) (f32x4.mul (local.get $d) (local.get $d))))
        (local.set $d (f32x4.sub (v128.load offset=48 (local.get $a)) (v128.load offset=48 (local.get $b))))
        (local.set $s3 (f32x4.add (local.get $s3) (f32x4.mul (local.get $d) (local.get $d))))
        (local.set $a (i32.add (local.get $a) (i32.const 64)))
        (local.set $b (i32.add (local.get $b) (i32.const 64)))
        (br $loop16)))
    (block $done4
      (loop $loop4
        (br_if $done4 (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $d (f32x4.sub (v128.load (local.get $a)) (v128.load (local.get $b))))
        (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (local.get $d) (local.get $d))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (br $loop4)))
    (call $hsum (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3)))))

  (func $nip (export "nip") (param $a i32) (param $b i32) (param $n i32) (result f32)
    (local $end i32) (local $end16 i32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128)
    (local.set $end (i32.add (local.get $a) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end16 (i32.sub (local.get $end) (i32.const 64)))
    (block $done16
      (loop $loop16
        (br_if $done16 (i32.gt_u (local.get $a) (local.get $end16)))
        (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
        (local.set $s1 (f32x4.add (local.get $s1) (f32x4.mul (v128.load offset=16 (local.get $a)) (v128.load offset=16 (local.get $b)))))
        (local.set $s2 (f32x4.add (local.get $s2) (f32x4.mul (v128.load offset=32 (local.get $a)) (v128.load offset=32 (local.get $b)))))
        (local.set $s3 (f32x4.add (local.get $s3) (f32x4.mul (v128.load offset=48 (local.get $a)) (v128.load offset=48 (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 64)))
        (local.set $b (i32.add (local.get $b) (i32.const 64)))
        (br $loop16)))
    (block $done4
      (loop $loop4
        (br_if $done4 (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (br $loop4)))
    (f32.neg (call $hsum (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3))))))

  ;; Loads one word of every cache line of each listed vector, so the loads of all candidates are in
  ;; flight together before the arithmetic needs them (a stand-in for prefetch). Returns a dummy sum
  ;; so the loads cannot be dropped.
  (func (export "touch") (param $base i32) (param $stride i32) (param $ids i32) (param $cnt i32) (param $bytes i32) (result i32)
    (local $i i32) (local $p i32) (local $end i32) (local $acc i32)
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $cnt)))
        (local.set $p (i32.add (local.get $base)
          (i32.mul (i32.load (i32.add (local.get $ids) (i32.shl (local.get $i) (i32.const 2)))) (local.get $stride))))
        (local.set $end (i32.add (local.get $p) (local.get $bytes)))
        (block $ldone
          (loop $line
            (br_if $ldone (i32.ge_u (local.get $p) (local.get $end)))
            (local.set $acc (i32.add (local.get $acc) (i32.load (local.get $p))))
            (local.set $p (i32.add (local.get $p) (i32.const 64)))
            (br $line)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (local.get $acc))

  ;; out[i] = dist(q, base + ids[i] * stride) for i < cnt. The distance loop is inlined (the same
  ;; arithmetic, in the same order, as $l2 / $nip, so the results are bit for bit theirs): at low
  ;; dimension the two nested calls per distance cost as much as the arithmetic.
  (func (export "l2_batch") (param $q i32) (param $base i32) (param $stride i32) (param $ids i32) (param $cnt i32) (param $out i32) (param $n i32)
    (local $i i32) (local $a i32) (local $b i32) (local $end i32) (local $end16 i32) (local $r f32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128) (local $d v128)
    (local.set $end (i32.add (local.get $q) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end16 (i32.sub (local.get $end) (i32.const 64)))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $cnt)))
        (local.set $a (local.get $q))
        (local.set $b (i32.add (local.get $base)
          (i32.mul (i32.load (i32.add (local.get $ids) (i32.shl (local.get $i) (i32.const 2)))) (local.get $stride))))
        (local.set $s0 (v128.const i64x2 0 0))
        (local.set $s1 (v128.const i64x2 0 0))
        (local.set $s2 (v128.const i64x2 0 0))
        (local.set $s3 (v128.const i64x2 0 0))
        (block $done16
          (loop $loop16
            (br_if $done16 (i32.gt_u (local.get $a) (local.get $end16)))
            (local.set $d (f32x4.sub (v128.load (local.get $a)) (v128.load (local.get $b))))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $d (f32x4.sub (v128.load offset=16 (local.get $a)) (v128.load offset=16 (local.get $b))))
            (local.set $s1 (f32x4.add (local.get $s1) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $d (f32x4.sub (v128.load offset=32 (local.get $a)) (v128.load offset=32 (local.get $b))))
            (local.set $s2 (f32x4.add (local.get $s2) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $d (f32x4.sub (v128.load offset=48 (local.get $a)) (v128.load offset=48 (local.get $b))))
            (local.set $s3 (f32x4.add (local.get $s3) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $a (i32.add (local.get $a) (i32.const 64)))
            (local.set $b (i32.add (local.get $b) (i32.const 64)))
            (br $loop16)))
        (block $done4
          (loop $loop4
            (br_if $done4 (i32.ge_u (local.get $a) (local.get $end)))
            (local.set $d (f32x4.sub (v128.load (local.get $a)) (v128.load (local.get $b))))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $a (i32.add (local.get $a) (i32.const 16)))
            (local.set $b (i32.add (local.get $b) (i32.const 16)))
            (br $loop4)))
        (local.set $d (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3))))
        (local.set $r (f32.add
          (f32.add (f32x4.extract_lane 0 (local.get $d)) (f32x4.extract_lane 1 (local.get $d)))
          (f32.add (f32x4.extract_lane 2 (local.get $d)) (f32x4.extract_lane 3 (local.get $d)))))
        (f32.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 2))) (local.get $r))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each))))

  (func (export "nip_batch") (param $q i32) (param $base i32) (param $stride i32) (param $ids i32) (param $cnt i32) (param $out i32) (param $n i32)
    (local $i i32) (local $a i32) (local $b i32) (local $end i32) (local $end16 i32) (local $r f32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128) (local $d v128)
    (local.set $end (i32.add (local.get $q) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end16 (i32.sub (local.get $end) (i32.const 64)))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $cnt)))
        (local.set $a (local.get $q))
        (local.set $b (i32.add (local.get $base)
          (i32.mul (i32.load (i32.add (local.get $ids) (i32.shl (local.get $i) (i32.const 2)))) (local.get $stride))))
        (local.set $s0 (v128.const i64x2 0 0))
        (local.set $s1 (v128.const i64x2 0 0))
        (local.set $s2 (v128.const i64x2 0 0))
        (local.set $s3 (v128.const i64x2 0 0))
        (block $done16
          (loop $loop16
            (br_if $done16 (i32.gt_u (local.get $a) (local.get $end16)))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
            (local.set $s1 (f32x4.add (local.get $s1) (f32x4.mul (v128.load offset=16 (local.get $a)) (v128.load offset=16 (local.get $b)))))
            (local.set $s2 (f32x4.add (local.get $s2) (f32x4.mul (v128.load offset=32 (local.get $a)) (v128.load offset=32 (local.get $b)))))
            (local.set $s3 (f32x4.add (local.get $s3) (f32x4.mul (v128.load offset=48 (local.get $a)) (v128.load offset=48 (local.get $b)))))
            (local.set $a (i32.add (local.get $a) (i32.const 64)))
            (local.set $b (i32.add (local.get $b) (i32.const 64)))
            (br $loop16)))
        (block $done4
          (loop $loop4
            (br_if $done4 (i32.ge_u (local.get $a) (local.get $end)))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
            (local.set $a (i32.add (local.get $a) (i32.const 16)))
            (local.set $b (i32.add (local.get $b) (i32.const 16)))
            (br $loop4)))
        (local.set $d (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3))))
        (local.set $r (f32.add
          (f32.add (f32x4.extract_lane 0 (local.get $d)) (f32x4.extract_lane 1 (local.get $d)))
          (f32.add (f32x4.extract_lane 2 (local.get $d)) (f32x4.extract_lane 3 (local.get $d)))))
        (f32.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 2))) (f32.neg (local.get $r)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each))))

  ;; The batch above, keeping only the slots nearer than `bound`: their ids and distances are packed at
  ;; the front of ids and out (in order), and the count is returned. A search passes its current worst
  ;; result, so the JavaScript loop after the call sees only the few candidates that can enter.
  (func (export "l2_batch_below") (param $q i32) (param $base i32) (param $stride i32) (param $ids i32) (param $cnt i32) (param $out i32) (param $n i32) (param $bound f32) (result i32)
    (local $i i32) (local $k i32) (local $id i32) (local $dist f32) (local $a i32) (local $b i32) (local $end i32) (local $end16 i32) (local $r f32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128) (local $d v128)
    (local.set $end (i32.add (local.get $q) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end16 (i32.sub (local.get $end) (i32.const 64)))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $cnt)))
        (local.set $a (local.get $q))
        (local.set $id (i32.load (i32.add (local.get $ids) (i32.shl (local.get $i) (i32.const 2)))))
        (local.set $b (i32.add (local.get $base) (i32.mul (local.get $id) (local.get $stride))))
        (local.set $s0 (v128.const i64x2 0 0))
        (local.set $s1 (v128.const i64x2 0 0))
        (local.set $s2 (v128.const i64x2 0 0))
        (local.set $s3 (v128.const i64x2 0 0))
        (block $done16
          (loop $loop16
            (br_if $done16 (i32.gt_u (local.get $a) (local.get $end16)))
            (local.set $d (f32x4.sub (v128.load (local.get $a)) (v128.load (local.get $b))))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $d (f32x4.sub (v128.load offset=16 (local.get $a)) (v128.load offset=16 (local.get $b))))
            (local.set $s1 (f32x4.add (local.get $s1) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $d (f32x4.sub (v128.load offset=32 (local.get $a)) (v128.load offset=32 (local.get $b))))
            (local.set $s2 (f32x4.add (local.get $s2) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $d (f32x4.sub (v128.load offset=48 (local.get $a)) (v128.load offset=48 (local.get $b))))
            (local.set $s3 (f32x4.add (local.get $s3) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $a (i32.add (local.get $a) (i32.const 64)))
            (local.set $b (i32.add (local.get $b) (i32.const 64)))
            (br $loop16)))
        (block $done4
          (loop $loop4
            (br_if $done4 (i32.ge_u (local.get $a) (local.get $end)))
            (local.set $d (f32x4.sub (v128.load (local.get $a)) (v128.load (local.get $b))))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (local.get $d) (local.get $d))))
            (local.set $a (i32.add (local.get $a) (i32.const 16)))
            (local.set $b (i32.add (local.get $b) (i32.const 16)))
            (br $loop4)))
        (local.set $d (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3))))
        (local.set $r (f32.add
          (f32.add (f32x4.extract_lane 0 (local.get $d)) (f32x4.extract_lane 1 (local.get $d)))
          (f32.add (f32x4.extract_lane 2 (local.get $d)) (f32x4.extract_lane 3 (local.get $d)))))
        (local.set $dist (local.get $r))
        ;; Compact without a branch: write at k, advance k only when below the bound.
        (i32.store (i32.add (local.get $ids) (i32.shl (local.get $k) (i32.const 2))) (local.get $id))
        (f32.store (i32.add (local.get $out) (i32.shl (local.get $k) (i32.const 2))) (local.get $dist))
        (local.set $k (i32.add (local.get $k) (f32.lt (local.get $dist) (local.get $bound))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (local.get $k))

  (func (export "nip_batch_below") (param $q i32) (param $base i32) (param $stride i32) (param $ids i32) (param $cnt i32) (param $out i32) (param $n i32) (param $bound f32) (result i32)
    (local $i i32) (local $k i32) (local $id i32) (local $dist f32) (local $a i32) (local $b i32) (local $end i32) (local $end16 i32) (local $r f32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128) (local $d v128)
    (local.set $end (i32.add (local.get $q) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end16 (i32.sub (local.get $end) (i32.const 64)))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $cnt)))
        (local.set $a (local.get $q))
        (local.set $id (i32.load (i32.add (local.get $ids) (i32.shl (local.get $i) (i32.const 2)))))
        (local.set $b (i32.add (local.get $base) (i32.mul (local.get $id) (local.get $stride))))
        (local.set $s0 (v128.const i64x2 0 0))
        (local.set $s1 (v128.const i64x2 0 0))
        (local.set $s2 (v128.const i64x2 0 0))
        (local.set $s3 (v128.const i64x2 0 0))
        (block $done16
          (loop $loop16
            (br_if $done16 (i32.gt_u (local.get $a) (local.get $end16)))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
            (local.set $s1 (f32x4.add (local.get $s1) (f32x4.mul (v128.load offset=16 (local.get $a)) (v128.load offset=16 (local.get $b)))))
            (local.set $s2 (f32x4.add (local.get $s2) (f32x4.mul (v128.load offset=32 (local.get $a)) (v128.load offset=32 (local.get $b)))))
            (local.set $s3 (f32x4.add (local.get $s3) (f32x4.mul (v128.load offset=48 (local.get $a)) (v128.load offset=48 (local.get $b)))))
            (local.set $a (i32.add (local.get $a) (i32.const 64)))
            (local.set $b (i32.add (local.get $b) (i32.const 64)))
            (br $loop16)))
        (block $done4
          (loop $loop4
            (br_if $done4 (i32.ge_u (local.get $a) (local.get $end)))
            (local.set $s0 (f32x4.add (local.get $s0) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
            (local.set $a (i32.add (local.get $a) (i32.const 16)))
            (local.set $b (i32.add (local.get $b) (i32.const 16)))
            (br $loop4)))
        (local.set $d (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3))))
        (local.set $r (f32.add
          (f32.add (f32x4.extract_lane 0 (local.get $d)) (f32x4.extract_lane 1 (local.get $d)))
          (f32.add (f32x4.extract_lane 2 (local.get $d)) (f32x4.extract_lane 3 (local.get $d)))))
        (local.set $dist (f32.neg (local.get $r)))
        ;; Compact without a branch: write at k, advance k only when below the bound.
        (i32.store (i32.add (local.get $ids) (i32.shl (local.get $k) (i32.const 2))) (local.get $id))
        (f32.store (i32.add (local.get $out) (i32.shl (local.get $k) (i32.const 2))) (local.get $dist))
        (local.set $k (i32.add (local.get $k) (f32.lt (local.get $dist) (local.get $bound))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (local.get $k))

  ;; out[i] = dist(q, base + (start + i) * stride) for i < cnt: the contiguous flat scan.
  (func (export "l2_range") (param $q i32) (param $base i32) (param $stride i32) (param $start i32) (param $cnt i32) (param $out i32) (param $n i32)
    (local $p i32) (local $end i32)
    (local.set $p (i32.add (local.get $base) (i32.mul (local.get $start) (local.get $stride))))
    (local.set $end (i32.add (local.get $out) (i32.shl (local.get $cnt) (i32.const 2))))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (f32.store (local.get $out) (call $l2 (local.get $q) (local.get $p) (local.get $n)))
        (local.set $p (i32.add (local.get $p) (local.get $stride)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $each))))

  (func (export "nip_range") (param $q i32) (param $base i32) (param $stride i32) (param $start i32) (param $cnt i32) (param $out i32) (param $n i32)
    (local $p i32) (local $end i32)
    (local.set $p (i32.add (local.get $base) (i32.mul (local.get $start) (local.get $stride))))
    (local.set $end (i32.add (local.get $out) (i32.shl (local.get $cnt) (i32.const 2))))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (f32.store (local.get $out) (call $nip (local.get $q) (local.get $p) (local.get $n)))
        (local.set $p (i32.add (local.get $p) (local.get $stride)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $each))))

;; Scalar-quantized (8-bit) rows, for a ScalarCodes memory (core/index/scalar-codes.ts). A row is `n`
;; int8 codes (n a multiple of 16) then an f32 term; the query at `q` is two f32 coefficients a and b,
;; 8 bytes of padding, then `n` int16 weights. dist = a * term + b * sum(weight * code), exact integer
;; dot products (i32x4.dot_i16x8_s) and two float operations per row. Like *_batch_below: ids and
;; distances below `bound` are packed at the front of `ids` and `out`; returns how many.
  (func (export "sq8_below") (param $q i32) (param $base i32) (param $stride i32) (param $ids i32) (param $cnt i32) (param $out i32) (param $n i32) (param $bound f32) (result i32)
    (local $i i32) (local $k i32) (local $id i32) (local $a i32) (local $b i32) (local $w i32) (local $end i32)
    (local $c v128) (local $s0 v128) (local $s1 v128) (local $ca f32) (local $cb f32) (local $dist f32)
    (local.set $ca (f32.load (local.get $q)))
    (local.set $cb (f32.load offset=4 (local.get $q)))
    (local.set $w (i32.add (local.get $q) (i32.const 16)))
    (local.set $end (i32.add (local.get $w) (i32.shl (local.get $n) (i32.const 1))))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $cnt)))
        (local.set $id (i32.load (i32.add (local.get $ids) (i32.shl (local.get $i) (i32.const 2)))))
        (local.set $b (i32.add (local.get $base) (i32.mul (local.get $id) (local.get $stride))))
        (local.set $a (local.get $w))
        (local.set $s0 (v128.const i64x2 0 0))
        (local.set $s1 (v128.const i64x2 0 0))
        (block $d16
          (loop $l16
            (br_if $d16 (i32.ge_u (local.get $a) (local.get $end)))
            (local.set $c (v128.load (local.get $b)))
            (local.set $s0 (i32x4.add (local.get $s0)
              (i32x4.dot_i16x8_s (v128.load (local.get $a)) (i16x8.extend_low_i8x16_s (local.get $c)))))
            (local.set $s1 (i32x4.add (local.get $s1)
              (i32x4.dot_i16x8_s (v128.load offset=16 (local.get $a)) (i16x8.extend_high_i8x16_s (local.get $c)))))
            (local.set $a (i32.add (local.get $a) (i32.const 32)))
            (local.set $b (i32.add (local.get $b) (i32.const 16)))
            (br $l16)))
        (local.set $s0 (i32x4.add (local.get $s0) (local.get $s1)))
        ;; $b now points at the row's f32 term.
        (local.set $dist (f32.add
          (f32.mul (local.get $ca) (f32.load (local.get $b)))
          (f32.mul (local.get $cb) (f32.convert_i32_s (i32.add
            (i32.add (i32x4.extract_lane 0 (local.get $s0)) (i32x4.extract_lane 1 (local.get $s0)))
            (i32.add (i32x4.extract_lane 2 (local.get $s0)) (i32x4.extract_lane 3 (local.get $s0))))))))
        (i32.store (i32.add (local.get $ids) (i32.shl (local.get $k) (i32.const 2))) (local.get $id))
        (f32.store (i32.add (local.get $out) (i32.shl (local.get $k) (i32.const 2))) (local.get $dist))
        (local.set $k (i32.add (local.get $k) (f32.lt (local.get $dist) (local.get $bound))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (local.get $k))
)
