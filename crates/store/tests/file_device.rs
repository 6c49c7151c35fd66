//! The store on a real file through io_uring and O_DIRECT: format, write
//! (journaled and redirected), read back, checkpoint, reopen, external journal.

use pontoon_buf::AlignedBuf;
use pontoon_store::{FileDevice, FormatOptions, Store};
use pontoon_types::{ObjectId, Version};

fn pattern(seed: u8, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::for_read(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = seed.wrapping_add((i / 4096) as u8).wrapping_mul(31) ^ (i as u8);
    }
    b
}

async fn open(path: &std::path::Path, journal: Option<&std::path::Path>) -> Store<FileDevice> {
    let dev = FileDevice::open(path).unwrap();
    let j = journal.map(|p| FileDevice::open(p).unwrap());
    let (store, bg) = Store::open(dev, j, 0).await.unwrap();
    compio::runtime::spawn(bg).detach();
    store
}

fn round_trip(journal: bool) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let jpath = dir.path().join("journal");
    FileDevice::create_file(&data, 96 << 20).unwrap();
    if journal {
        FileDevice::create_file(&jpath, 24 << 20).unwrap();
    }
    let jp = journal.then_some(jpath.as_path());
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let dev = FileDevice::open(&data).unwrap();
        let j = jp.map(|p| FileDevice::open(p).unwrap());
        Store::format(&dev, j.as_ref(), &FormatOptions::default())
            .await
            .unwrap();
        drop((dev, j));
        let s = open(&data, jp).await;
        let a = ObjectId::new(1, 0);
        let b = ObjectId::new(1, 1);
        s.write(a, 8192, pattern(1, 4096), Version::new(1, 1))
            .await
            .unwrap();
        s.write(b, 0, pattern(2, 1 << 20), Version::new(1, 2))
            .await
            .unwrap();
        let futs: Vec<_> = (0..32u64)
            .map(|i| {
                s.write(
                    ObjectId::new(2, i),
                    i * 4096,
                    pattern(i as u8, 4096),
                    Version::new(1, 10 + i),
                )
            })
            .collect();
        for r in futures::future::join_all(futs).await {
            r.unwrap();
        }
        let st = s.stats();
        assert!(
            st.records < 34,
            "32 concurrent writes were grouped into fewer records: {}",
            st.records
        );
        assert_eq!(
            &s.read(a, 8192, 4096).await.unwrap().data[..],
            &pattern(1, 4096)[..]
        );
        assert_eq!(
            &s.read(b, 0, 1 << 20).await.unwrap().data[..],
            &pattern(2, 1 << 20)[..]
        );
        s.checkpoint().await.unwrap();
        s.write(a, 0, pattern(9, 8192), Version::new(1, 99))
            .await
            .unwrap();
        s.close().await.unwrap();
        drop(s);
        let s = open(&data, jp).await;
        let r = s.read(a, 0, 12288).await.unwrap();
        assert_eq!(r.version, Version::new(1, 99));
        assert_eq!(&r.data[..8192], &pattern(9, 8192)[..]);
        assert_eq!(&r.data[8192..], &pattern(1, 4096)[..]);
        assert_eq!(
            &s.read(b, 0, 1 << 20).await.unwrap().data[..],
            &pattern(2, 1 << 20)[..]
        );
        for i in 0..32u64 {
            let r = s.read(ObjectId::new(2, i), i * 4096, 4096).await.unwrap();
            assert_eq!(&r.data[..], &pattern(i as u8, 4096)[..]);
        }
        assert_eq!(s.list().len(), 34);
        s.close().await.unwrap();
    });
}

#[test]
fn file_store_round_trips_through_reopen() {
    round_trip(false);
}

#[test]
fn file_store_with_external_journal_round_trips() {
    round_trip(true);
}

#[test]
fn opening_without_the_external_journal_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let jpath = dir.path().join("journal");
    FileDevice::create_file(&data, 64 << 20).unwrap();
    FileDevice::create_file(&jpath, 20 << 20).unwrap();
    compio::runtime::Runtime::new().unwrap().block_on(async {
        let dev = FileDevice::open(&data).unwrap();
        let j = FileDevice::open(&jpath).unwrap();
        Store::format(&dev, Some(&j), &FormatOptions::default())
            .await
            .unwrap();
        let e = Store::open(FileDevice::open(&data).unwrap(), None, 0)
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("--journal"), "{e}");
        let other = dir.path().join("plain");
        FileDevice::create_file(&other, 4 << 20).unwrap();
        let e = Store::open(FileDevice::open(&other).unwrap(), None, 0)
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("not a Pontoon store"), "{e}");
    });
}
