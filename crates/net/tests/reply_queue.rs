//! The front-end reply queue: replies pushed while the writer is parked are
//! sent by the pusher; what the socket does not take (a peer that reads
//! slowly, a small send buffer) goes to the writer. Whatever path each
//! reply takes, the peer must receive every byte, in push order.

use std::io::Read;
use std::rc::Rc;
use std::time::Duration;

use compio::net::TcpStream;
use pontoon_buf::AlignedBuf;
use pontoon_net::stream::{OutBuf, Reply, ReplyQueue, write_replies};

/// Reply `i`: a header naming it and a data part of a size that varies
/// from a few bytes to 64 KiB, filled with a pattern of `i`.
fn reply_bytes(i: u32) -> (Vec<u8>, Vec<u8>) {
    let head = format!("reply {i:05}|").into_bytes();
    let len = ((i as usize * 7919) % (64 << 10)) + 1;
    let data = (0..len)
        .map(|k| (k as u32 ^ i.wrapping_mul(31)) as u8)
        .collect();
    (head, data)
}

#[test]
fn every_reply_arrives_whole_and_in_order_whatever_path_it_takes() {
    const REPLIES: u32 = 150;
    let expected: Vec<u8> = (0..REPLIES)
        .flat_map(|i| {
            let (h, d) = reply_bytes(i);
            [h, d].concat()
        })
        .collect();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let total = expected.len();
    // The peer reads slowly, in small pieces, so the socket is often
    // nearly full: immediate sends come back short or refused.
    let peer = std::thread::spawn(move || {
        let (mut s, _) = std_listener.accept().unwrap();
        let mut got = Vec::with_capacity(total);
        let mut buf = vec![0u8; 24 << 10];
        while got.len() < total {
            std::thread::sleep(Duration::from_micros(100));
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "stream ended after {} of {total} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    compio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            socket2::SockRef::from(&stream)
                .set_send_buffer_size(16 << 10)
                .unwrap();
            let queue = Rc::new(ReplyQueue::new(stream.clone()));
            let writer = compio::runtime::spawn(write_replies(stream, queue.clone()));
            for i in 0..REPLIES {
                let (head, data) = reply_bytes(i);
                queue.push(Reply {
                    parts: vec![
                        OutBuf::Bytes(head),
                        OutBuf::Data {
                            buf: Rc::new(AlignedBuf::copy_from(&data)),
                            start: 0,
                            end: data.len(),
                        },
                    ],
                    permit: None,
                });
                // Pauses shorter than the peer takes to drain a reply: the
                // writer often parks with the socket still part full, so the
                // next push is sent short by the pusher and finished by the
                // writer.
                if i % 4 != 3 {
                    compio::time::sleep(Duration::from_micros(300)).await;
                }
            }
            queue.close();
            writer.await.unwrap().unwrap();
        });
    let got = peer.join().unwrap();
    assert_eq!(got.len(), expected.len());
    let first_bad = got.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(
        first_bad, None,
        "the stream differs from the replies pushed"
    );
}
