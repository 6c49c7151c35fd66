pub use crate::sys::op::{
    Send as SendZc, SendMsg as SendMsgZc, SendTo as SendToZc, SendToVectored as SendToVectoredZc,
    SendVectored as SendVectoredZc,
};
